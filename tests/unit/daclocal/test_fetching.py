"""The site's proxy and CA settings reach every download of the local DAC (daclocal/fetching.py)."""

from daclocal import fetching


def test_each_proxy_variable_is_given_in_both_spellings(tmp_path):
    bundle = tmp_path / "proxy-ca.crt"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    out = fetching.env(
        {
            "HTTPS_PROXY": "http://proxy:3128",
            "no_proxy": "localhost",
            "SSL_CERT_FILE": str(bundle),
            "PATH": "/usr/bin",
        }
    )
    # apt and wget read only the lower case, Go and pip either
    assert out["https_proxy"] == out["HTTPS_PROXY"] == "http://proxy:3128"
    assert out["no_proxy"] == out["NO_PROXY"] == "localhost"
    assert "http_proxy" not in out and "HTTP_PROXY" not in out  # nothing invented
    assert out["SSL_CERT_FILE"] == str(bundle) and out["PATH"] == "/usr/bin"


def test_a_value_given_in_each_case_is_kept_as_given():
    out = fetching.env({"http_proxy": "http://a:1", "HTTP_PROXY": "http://b:2"})
    assert (out["http_proxy"], out["HTTP_PROXY"]) == ("http://a:1", "http://b:2")


def test_the_ca_bundle_is_ssl_cert_file_when_it_names_a_file(tmp_path, monkeypatch):
    bundle = tmp_path / "ca.crt"
    bundle.write_text("x")
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    assert fetching.ca_bundle() == str(bundle)
    rc = fetching.wgetrc(tmp_path)
    assert (tmp_path / "wgetrc").read_text() == f"ca_certificate = {bundle}\n"
    assert rc == {"WGETRC": str(tmp_path / "wgetrc")}
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "missing"))
    assert fetching.ca_bundle() == "/etc/ssl/certs/ca-certificates.crt"  # Debian's
