"""Start and stop the runtime's containers through the Docker SDK, from rendered specs.

`create_args(api, spec)` is the one translation from a `ContainerSpec` to docker-py's arguments,
so what `render` prints is exactly what runs.
"""

from __future__ import annotations

from typing import Optional

from sparkctl.launch.names import LABEL_PREFIX
from sparkctl.launch.plan import ContainerSpec

IMAGE_LABEL = f"{LABEL_PREFIX}.image"  # the image identity (facts/docker.py) the container was started from


def create_args(api, spec: ContainerSpec, identity: Optional[str] = None) -> dict:
    """docker-py low-level `create_container` arguments for a spec (the high-level `run` cannot
    set a stop timeout, and the drain needs one)."""
    from docker.types import DeviceRequest, LogConfig, Ulimit

    host_config = api.create_host_config(
        network_mode=spec.network_mode,
        ipc_mode=spec.ipc_mode,
        # --gpus all
        device_requests=[DeviceRequest(count=-1, capabilities=[["gpu"]])] if spec.gpus == "all" else None,
        devices=[f"{d}:{d}:rwm" for d in spec.devices],
        ulimits=[Ulimit(name=k, soft=v, hard=v) for k, v in spec.ulimits.items()],
        mem_limit=spec.memory_bytes,
        log_config=LogConfig(type="json-file", config=dict(spec.log_options)),
        # -v semantics (binds), as the rendered `docker run` line shows
        binds={m.source: {"bind": m.target, "mode": "ro" if m.read_only else "rw"} for m in spec.mounts},
    )
    return dict(
        image=spec.image,
        entrypoint=[spec.entrypoint],
        command=spec.arguments,
        name=spec.name,
        environment=dict(spec.env),
        labels={**spec.labels, **({IMAGE_LABEL: identity} if identity else {})},
        host_config=host_config,
        stop_signal="SIGTERM",
        stop_timeout=spec.stop_timeout,
        detach=True,
    )


def start(client, spec: ContainerSpec, identity: Optional[str] = None) -> None:
    """Remove any stale container of the same name, then create and start this spec (labelled with
    the identity of the image it starts, when known: --check can then tell it runs that image even
    while the node's tag is being pulled again)."""
    import docker

    try:
        client.containers.get(spec.name).remove(force=True)
    except docker.errors.NotFound:
        pass
    client.api.start(client.api.create_container(**create_args(client.api, spec, identity))["Id"])


STAGED_SUFFIX = "-next"  # a replacement's name while the container it replaces still runs


def replace(
    client,
    spec: ContainerSpec,
    identity: Optional[str] = None,
    timeout: Optional[int] = None,
    timings: Optional[dict[str, dict]] = None,
) -> None:
    """Replace the running container of `spec.name` with one of `spec`, out of service for as short a
    time as docker allows: the new container is created (as `<name>-next`) while the old one still
    serves, and started the moment the old one has stopped (SIGTERM, drain up to its stop timeout);
    the old one's removal and the rename come after. A create that fails (image, arguments) fails
    with the old container still running. `timings` as for stop()."""
    import docker

    staged_name = spec.name + STAGED_SUFFIX
    try:  # left by a replace that was interrupted
        client.containers.get(staged_name).remove(force=True)
    except docker.errors.NotFound:
        pass
    args = create_args(client.api, spec, identity)
    staged = client.api.create_container(**{**args, "name": staged_name})["Id"]
    try:
        old = client.containers.get(spec.name)
    except docker.errors.NotFound:
        old = None
    stopped_s = _stop(old, timeout) if old is not None and old.status == "running" else None
    try:
        client.api.start(staged)
    except docker.errors.APIError:
        client.api.remove_container(staged, force=True)  # a later run must not find it beside the name
        raise
    if old is not None:
        if timings is not None and stopped_s is not None:
            timings[spec.name] = stop_timing(old, stopped_s, timeout)
        old.remove(force=True)
    client.api.rename(staged, spec.name)


def stop(
    client,
    cluster: str,
    timeout: Optional[int] = None,
    names: Optional[list[str]] = None,
    logs: Optional[dict[str, str]] = None,
    timings: Optional[dict[str, dict]] = None,
) -> list[str]:
    """Stop (SIGTERM, drain up to the container's stop timeout) and remove this cluster's containers
    (only those named, when `names` is given); with `logs`, keep each one's last log lines first;
    with `timings`, how long each stop took and whether docker had to kill it (StopTiming)."""
    stopped = []
    for c in client.containers.list(all=True, filters={"label": [f"{LABEL_PREFIX}.cluster={cluster}"]}):
        if names is not None and c.name not in names:
            continue
        if c.status == "running":
            seconds = _stop(c, timeout)
            if timings is not None:
                timings[c.name] = stop_timing(c, seconds, timeout)
        if logs is not None:
            logs[c.name] = c.logs(tail=400).decode(errors="replace")
        c.remove(force=True)
        stopped.append(c.name)
    return stopped


def _stop(container, timeout: Optional[int]) -> float:
    """SIGTERM, drain up to `timeout` (else the container's own stop timeout); the seconds it took."""
    import time

    t0 = time.monotonic()
    container.stop(timeout=timeout) if timeout is not None else container.stop()
    return time.monotonic() - t0


def stop_timing(container, seconds: float, timeout: Optional[int]) -> dict:
    """How a stop went: its seconds, the timeout it had (the call's, else the container's own), and
    whether the process was killed: it did not exit on SIGTERM within the timeout, and docker sent
    SIGKILL (exit 137 without the OOM killer), the stop that hangs (docs/reload.md)."""
    container.reload()
    st = container.attrs.get("State") or {}
    code = st.get("ExitCode")
    bound = timeout if timeout is not None else (container.attrs.get("Config") or {}).get("StopTimeout")
    return {
        "seconds": round(seconds, 2),
        "timeout_s": bound,
        "exit_code": code,
        "killed": code == 137 and not st.get("OOMKilled"),
    }


def stop_line(name: str, t: dict) -> str:
    if t["killed"]:
        return (
            f"{name} KILLED after {t['seconds']:.1f} s: it did not exit on SIGTERM within its stop timeout "
            f"({t['timeout_s']} s), docker sent SIGKILL"
        )
    return f"{name} stopped in {t['seconds']:.1f} s (exit {t['exit_code']})"


def wait_answering(client, host: str, container: str, url: str, deadline_s: float, fix: str) -> float:
    """Seconds until `url` answers 200 (a front container's own page), or a HostError naming the
    container's state and its last log line: it exited, or it runs and does not answer by the deadline."""
    import time

    import httpx

    from sparkctl import httpclient
    from sparkctl.errors import HostError

    t0 = time.monotonic()
    with httpclient.client(timeout=2, trust_env=False) as http:
        while True:
            try:
                if http.get(url).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            c = client.containers.get(container)
            if c.status != "running" or time.monotonic() - t0 > deadline_s:
                tail = c.logs(tail=5).decode(errors="replace").strip().splitlines()
                state = "is " + c.status if c.status != "running" else "does not answer"
                raise HostError(f"{host}: {container} {state}{': ' + tail[-1] if tail else ''}", fix=fix)
            time.sleep(0.1)
