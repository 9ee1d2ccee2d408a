"""How sparkctl reaches hosts: SSH (Fabric/Paramiko) and Docker Engine over that SSH connection."""
