"""Simulated hardware tools of the lab hosts (nvidia-smi, ibdev2netdev, ethtool) and their sysfs. Stdlib only."""
