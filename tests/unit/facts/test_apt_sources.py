"""apt sources (.list and deb822 .sources) and apt-get update's signature errors, on real
captures (tests/data/apt, SOURCES.md)."""

import pytest

from gpunode.facts.apt_sources import (
    APT_SOURCES_COMMAND,
    parse_apt_sources_sections,
    parse_apt_update,
    parse_apt_update_log,
    parse_deb822_sources,
    parse_sources_list,
    signature_problem_message,
    source_for,
)
from gpunode.ops.apt import APT_UPDATE_COMMAND, update_messages

from ._data import read

CUDA = "https://developer.download.nvidia.com/compute/cuda/repos"
SHA1 = "SHA1 is not considered secure since 2026-02-01T00:00:00Z"
KEY = "EB693B3035CD5710E231E123A4B469963BF863CC"


def test_deb822_sources_of_debian13():
    sources = parse_deb822_sources(read("apt/debian_trixie_deb_src_enabled.sources"),
                                   "/etc/apt/sources.list.d/debian.sources")
    assert [(s.uris, s.suites, s.types) for s in sources] == [
        (["https://deb.debian.org/debian/"], ["trixie", "trixie-updates", "trixie-backports"],
         ["deb", "deb-src"]),
        (["https://deb.debian.org/debian-security/"], ["trixie-security"], ["deb", "deb-src"]),
    ]
    assert all(s.enabled for s in sources)
    assert sources[0].signed_by == "/usr/share/keyrings/debian-archive-keyring.pgp"
    assert sources[0].components == ["main", "non-free-firmware", "contrib", "non-free"]


def test_deb822_proxmox_ve9_source_and_a_disabled_stanza():
    text = read("apt/pve_install_repo_trixie.sources")
    (pve,) = parse_deb822_sources(text, "/etc/apt/sources.list.d/pve-install-repo.sources")
    assert (pve.uris, pve.suites, pve.components) == (
        ["http://download.proxmox.com/debian/pve"], ["trixie"], ["pve-no-subscription"])
    (off,) = parse_deb822_sources(text + "Enabled: no\n", "x.sources")
    assert off.enabled is False


def test_one_line_list_with_signed_by():
    (cuda,) = parse_sources_list(read("apt/cuda_debian12_x86_64.list"), "cuda.list")
    assert cuda.uris == [f"{CUDA}/debian12/x86_64/"] and cuda.suites == ["/"]
    assert cuda.signed_by == "/usr/share/keyrings/cuda-archive-keyring.gpg"
    assert parse_sources_list("# deb http://x/ y main\n\ndeb-src\n", "c.list") == []


def test_both_formats_are_read_from_one_command():
    text = ("@@gpunode:/etc/apt/sources.list.d/cuda-debian12-x86_64.list\n"
            + read("apt/cuda_debian12_x86_64.list")
            + "\n@@gpunode:/etc/apt/sources.list.d/debian.sources\n"
            + read("apt/debian_trixie_deb_src_enabled.sources") + "\n")
    sources = parse_apt_sources_sections(text)
    assert [s.path for s in sources] == ["/etc/apt/sources.list.d/cuda-debian12-x86_64.list"] + [
        "/etc/apt/sources.list.d/debian.sources"] * 2
    assert "sources.list.d/*.sources" in APT_SOURCES_COMMAND
    assert "sources.list.d/*.list" in APT_SOURCES_COMMAND
    found = source_for(f"{CUDA}/debian12/x86_64", sources)
    assert found is not None and found.path.endswith("cuda-debian12-x86_64.list")


def test_apt3_sqv_rejects_nvidias_sha1_key():
    (problem,) = parse_apt_update(read("apt/apt_update_sqv_sha1_cuda_ubuntu2404.txt"))
    assert problem.repository == f"{CUDA}/ubuntu2404/x86_64"
    assert (problem.kind, problem.key, problem.fatal, problem.detail) == (
        "weak key", KEY, True, SHA1)
    message = signature_problem_message("gpu1", problem)
    assert message.startswith(f"gpu1: apt rejects the signature of {CUDA}/ubuntu2404/x86_64 "
                              f"(key {KEY}): {SHA1}. Fix: ")
    assert f"{CUDA}/debian13/x86_64/" in message and "cuda-keyring" in message


def test_apt3_warning_form_of_the_same_rejection():
    """apt 3.1 prints Warning: lines and keeps the old lists: still a rejection."""
    (problem,) = parse_apt_update(read("apt/apt3_update_sqv_sha1_cuda_wsl_warning.txt"))
    assert (problem.repository, problem.kind, problem.fatal) == (
        f"{CUDA}/wsl-ubuntu/x86_64", "weak key", True)


def test_apt3_will_reject_is_a_warning_and_audit_says_why():
    (warning,) = parse_apt_update(read("apt/apt3_update_will_reject_cuda_debian12_on_trixie.txt"))
    assert (warning.kind, warning.fatal) == ("will reject", False)
    (audit,) = parse_apt_update(read("apt/apt3_update_audit_cuda_debian12_on_trixie.txt"))
    assert (audit.kind, audit.key, audit.detail, audit.fatal) == ("weak key", KEY, SHA1, False)
    sources = parse_sources_list(read("apt/cuda_debian12_x86_64.list"),
                                 "/etc/apt/sources.list.d/cuda-debian12-x86_64.list")
    message = signature_problem_message("gpu1", warning, sources)
    assert ("apt warns about the signature of "
            f"{CUDA}/debian12/x86_64 (defined in /etc/apt/sources.list.d/cuda-debian12-x86_64."
            "list): Policy will reject signature within a year") in message


def test_gpgv_no_pubkey():
    (problem,) = parse_apt_update(read("apt/apt_update_no_pubkey_cuda_ubuntu2004.txt"))
    assert problem.repository == ("http://developer.download.nvidia.com/compute/cuda/repos/"
                                  "ubuntu2004/x86_64")
    assert (problem.kind, problem.key, problem.fatal) == ("no public key", "A4B469963BF863CC",
                                                          True)
    assert "Signed-By:" in signature_problem_message("gpu1", problem)


@pytest.mark.parametrize("text", ["", "Hit:1 http://deb.debian.org/debian trixie InRelease\n"
                                  "Reading package lists...\n", "E: Could not get lock"])
def test_no_signature_problem(text):
    assert parse_apt_update(text) == []


def test_update_log_and_messages():
    log = read("apt/apt_update_sqv_sha1_cuda_ubuntu2404.txt") + "gpunode-apt-update-rc=100\n"
    result = parse_apt_update_log(log)
    assert result.rc == 100 and len(result.problems) == 1
    errors, warnings = update_messages("gpu1", result)
    assert len(errors) == 1 and warnings == [] and "Fix:" in errors[0]
    other = parse_apt_update_log("E: Could not get lock /var/lib/apt/lists/lock\n"
                                 "gpunode-apt-update-rc=100\n")
    assert update_messages("gpu1", other) == (
        ["gpu1: apt-get update failed (exit 100): E: Could not get lock /var/lib/apt/lists/lock"],
        [])
    fine = parse_apt_update_log(read("apt/apt3_update_will_reject_cuda_debian12_on_trixie.txt")
                                + "gpunode-apt-update-rc=0\n")
    errors, warnings = update_messages("gpu1", fine)
    assert errors == [] and len(warnings) == 1
    assert "2>&1" in APT_UPDATE_COMMAND and APT_UPDATE_COMMAND.endswith("apt-update.log")


def test_real_no_pubkey_from_this_machines_apt_with_both_source_formats():
    """Produced here (apt 2.6.1): trixie signed-by a bullseye key, once as a .sources stanza,
    once as a .list line (identical output): the repository named with its suite, and the
    file that defines it found in either format."""
    (problem,) = parse_apt_update(read("apt/apt2.6_update_no_pubkey_wrong_signed_by.txt"))
    assert (problem.repository, problem.kind, problem.key, problem.fatal) == (
        "http://deb.debian.org/debian trixie", "no public key", "6ED0E7B82643E131", True)
    debian12 = parse_deb822_sources(read("apt/debian12_build_vm_commented.sources"),
                                    "/etc/apt/sources.list.d/debian.sources")
    assert [s.suites for s in debian12] == [["bookworm", "bookworm-updates"],
                                            ["bookworm-security"]]  # comments inside stanzas
    for name, parse in (("wrong_key_trixie.sources", parse_deb822_sources),
                        ("wrong_key_trixie.list", parse_sources_list)):
        path = f"/etc/apt/sources.list.d/{name}"
        sources = debian12 + parse(read(f"apt/{name}"), path)
        assert source_for(problem.repository, sources).path == path  # not debian.sources
        message = signature_problem_message("gpu1", problem, sources)
        assert message.startswith("gpu1: apt rejects the signature of http://deb.debian.org/"
                                  f"debian trixie (defined in {path}, key 6ED0E7B82643E131): "
                                  "public key is not available: NO_PUBKEY 6ED0E7B82643E131")
