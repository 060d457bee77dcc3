"""The embedded demo upstream: a small kernel library written as a git history with planted steps."""

from bisector.demo.demo_config import DemoDeviceError, demo_config, pick_device
from bisector.demo.repo import DemoDirError, DemoManifest, Plant, write_demo_repo

__all__ = ["DemoDeviceError", "DemoDirError", "DemoManifest", "Plant", "demo_config", "pick_device", "write_demo_repo"]
