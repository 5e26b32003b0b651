"""KernelModuleTrees' command in the real shell over a scratch /lib/modules."""

import subprocess

from gpunode.facts.boot_modules import KernelModuleTrees, parse_kernel_trees


def test_finds_each_layouts_module_and_skips_the_in_tree_folder(tmp_path):
    """DKMS (updates/dkms), extra/, NVIDIA's .run installer (kernel/drivers/video) and Ubuntu's
    precompiled package (kernel/nvidia-550) are found; the rest of kernel/ is not walked."""
    root = tmp_path / "modules"
    layouts = {"6.8.12-4-pve": "updates/dkms/nvidia.ko", "6.1.0-26-amd64": "extra/nvidia.ko.xz",
               "6.12.9-amd64": "kernel/drivers/video/nvidia.ko",
               "6.8.0-90-generic": "kernel/nvidia-550/nvidia.ko.zst"}
    for version, path in layouts.items():
        (root / version / path).parent.mkdir(parents=True)
        (root / version / path).write_text("stand-in")
        (root / version / "kernel" / "drivers" / "net").mkdir(parents=True, exist_ok=True)
        (root / version / "kernel" / "drivers" / "net" / "e1000.ko").write_text("in tree")
    (root / "6.8.12-4-pve" / "kernel" / "drivers" / "gpu").mkdir(parents=True)
    (root / "6.8.12-4-pve" / "kernel" / "drivers" / "gpu" / "nvidia.ko").write_text("unseen")
    (root / "6.8.12-4-pve" / "build").mkdir()
    command = KernelModuleTrees().command().replace("/lib/modules", str(root))
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True).stdout
    trees = parse_kernel_trees(out.replace(str(root), "/lib/modules"))
    assert {v: t.nvidia_modules for v, t in trees.kernels.items()} == {
        v: [f"/lib/modules/{v}/{p}"] for v, p in layouts.items()}
    assert [v for v, t in trees.kernels.items() if t.build] == ["6.8.12-4-pve"]
