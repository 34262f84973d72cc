"""libdacstage (dacstage.h, dacstage.c, examples/checkpoint.c, Makefile): stages from inside a
running job, for C and Fortran programs. Shipped in the wheel as the package
`daccore.share.libdacstage` (pyproject.toml's package-dir), found with
`daccore.share.asset("libdacstage", ...)` and built with `make -C <that directory> OUT=<dir>`.
Not Python code: this file only makes the folder a package so setuptools maps it."""
