"""Which servers a stage is split across, by the backend's rule (issue 35): a local buffer's
servers must share the primary's mount namespace, a lustre buffer's its kernel (the one client
tree here), a daos buffer's never split."""

from dacd.staging_split import reaches, split_reach

HERE = "boot-a:mnt:[4026531841]"


def test_a_local_buffer_reaches_only_the_same_mount_namespace_of_the_same_boot():
    assert reaches(HERE, HERE, "namespace")
    assert not reaches(HERE, "boot-a:mnt:[4026532000]", "namespace")
    assert not reaches(HERE, "boot-b:mnt:[4026531841]", "namespace")
    assert not reaches(HERE, None, "namespace")


def test_a_lustre_buffer_reaches_every_namespace_of_the_primarys_kernel_and_no_other():
    assert reaches(HERE, "boot-a:mnt:[4026532000]", "kernel")  # another host of the site
    assert not reaches(HERE, "boot-b:mnt:[4026531841]", "kernel")  # another machine
    assert not reaches(HERE, None, "kernel")  # a dacd that said no view


def test_none_reaches_nothing():
    assert not reaches(HERE, HERE, "none")


def test_each_backend_says_its_rule():

    from daccore.backends import _registry

    rules = [split_reach(_registry()[name]) for name in ("local", "lustre", "daos")]
    assert rules == ["namespace", "kernel", "none"]
