"""burst_buffer.conf's Flags as dac reads them: TeardownFailure, whose absence an admin is
warned of (`dacctl hosts`), since without it a held job keeps its pool capacity in Slurm."""

from daccore.settings.bb_policy import read_rules, site_warnings


def test_teardown_failure_is_read_case_insensitively_among_other_flags(tmp_path):
    conf = tmp_path / "burst_buffer.conf"
    conf.write_text("Directive=DW\nflags=EnablePersistent,teardownfailure  # as shipped\n")
    rules = read_rules(str(conf))
    assert rules["teardown_failure"] and rules["enable"]
    assert site_warnings(str(conf)) == []


def test_its_absence_is_one_warning_naming_the_file_and_the_fix(tmp_path):
    conf = tmp_path / "burst_buffer.conf"
    conf.write_text("Flags=EnablePersistent\nFlags=EmulateCray\n")  # the later line wins
    (line,) = site_warnings(str(conf))
    assert line.startswith(f"burst_buffer_conf {conf}: Flags has no TeardownFailure: ")
    assert "\n" not in line and "add it" in line


def test_no_file_named_means_no_warning_and_an_unreadable_one_says_so(tmp_path):
    assert site_warnings("") == []
    (line,) = site_warnings(str(tmp_path / "missing.conf"))
    assert "No such file or directory" in line and "\n" not in line
