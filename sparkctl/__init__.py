"""sparkctl: bring up and run a DeepSeek V4 Flash cluster of DGX Sparks from one inventory file."""

__version__ = "0.1.0"
