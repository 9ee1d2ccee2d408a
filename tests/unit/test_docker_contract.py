"""The docker-py internals sparkctl/transport/docker.py builds on, checked against the installed
docker-py: pyproject.toml pins its major version (docker>=7.1,<8), and this test says which
private name moved if a release inside the pin ever changes them."""

from __future__ import annotations

import inspect

import docker
from docker import constants
from docker.transport.basehttpadapter import BaseHTTPAdapter
from docker.transport.sshconn import SSHConnectionPool, SSHHTTPAdapter
from urllib3._collections import RecentlyUsedContainer

from sparkctl.transport.docker import _SharedSSHAdapter


def test_docker_py_is_inside_the_pinned_major_version():
    assert docker.__version__.split(".")[0] == "7", docker.__version__


def test_the_private_names_the_ssh_transport_uses_exist():
    assert callable(docker.APIClient._retrieve_server_version)
    assert {"ssh_client", "timeout", "maxsize", "host"} <= set(inspect.signature(SSHConnectionPool.__init__).parameters)
    assert hasattr(SSHHTTPAdapter, "get_connection") and hasattr(SSHHTTPAdapter, "_connect")
    assert isinstance(constants.DEFAULT_MAX_POOL_SIZE, int) and isinstance(constants.DEFAULT_NUM_POOLS, int)
    pools = RecentlyUsedContainer(2, dispose_func=lambda p: None)  # where the adapter keeps its pools
    with pools.lock:  # get_connection takes this lock
        pools["u"] = "pool"
    assert pools.get("u") == "pool"


def test_an_api_client_accepts_the_shared_adapter_without_connecting():
    # use_ssh_client=True: docker-py opens no connection of its own at init; ours is mounted instead
    api = docker.APIClient(base_url="ssh://root@127.0.0.1:22", version="1.41", use_ssh_client=True)
    adapter = _SharedSSHAdapter(ssh_client=None, host_label="head", timeout=5)
    api._custom_adapter = adapter
    api.mount("http+docker://ssh", adapter)
    assert api.get_adapter("http+docker://ssh/v1.41/info") is adapter
    assert isinstance(adapter, BaseHTTPAdapter) and adapter.get_connection("http+docker://ssh").timeout == 5


def test_the_adapter_never_opens_an_ssh_connection_of_its_own():
    # docker-py reconnects a client whose transport is gone; ours belongs to HostSession: refused by name
    import paramiko
    import pytest

    from sparkctl.errors import HostError

    adapter = _SharedSSHAdapter(ssh_client=paramiko.SSHClient(), host_label="head", timeout=5)
    with pytest.raises(HostError, match="head: the SSH connection to this host was closed"):
        adapter.get_connection("http+docker://ssh")
