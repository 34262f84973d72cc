"""The all-in-one local DAC: a real etcd, real dacd processes and loop-file bricks on one
machine, for `make demo`, the system tests, and sites trying dac before installing it."""
