"""Team volumes: persistent ext4 disks a team mounts into its sandboxes and reads and writes
through the volume file API (E2B's ``Volume``)."""

from sandgate.volumes.files import Entry, VolumeFiles, check_volume_path
from sandgate.volumes.service import VolumeService, check_mount_path

__all__ = ["Entry", "VolumeFiles", "VolumeService", "check_mount_path", "check_volume_path"]
