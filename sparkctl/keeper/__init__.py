"""The keeper: brings the cluster back by itself after a crash or a reboot (docs/keeper.md)."""
