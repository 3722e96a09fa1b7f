"""The netem gateway: a small QEMU VM whose Linux kernel has netem, used where the host's
kernel has none. Built from Debian packages (image.py), run per testbed (vm.py)."""
