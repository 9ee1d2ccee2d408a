"""Issue 40 item 3: the images step asks the registry through the head's dockerd (the Engine API's
GET /distribution/{name}/json, over the run's SSH connection), not from the control machine, so a
laptop without the registry's network or credentials still plans; this machine is asked only when
the node's dockerd cannot reach the registry, and when neither can the message says so.

Replays tests/unit/recorded/image_transport/distribution-lab.json: the head dockerd's answers
recorded on the lab (record_distribution.py there): the image's tag, a multi-platform index, a
missing tag, a registry port nothing listens on, and `docker image inspect` of what docker recorded
pulling each. The one refusal here (401) is written from distribution's errcode text, not recorded:
the lab registry has no authentication."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from types import SimpleNamespace

import docker
import pytest
import requests
from hostfacts import host_facts, inventory, sec
from image_samples import inspect_section
from test_step_plans import NAMES, container_json

from sparkctl.facts.docker import fact_of_inspect
from sparkctl.launch.plan import render
from sparkctl.steps.base import RunContext, RunOptions
from sparkctl.steps.images import ImagesStep, ask_node, unknown_until_pulled
from sparkctl.steps.runtime import RuntimeStep
from sparkctl.transport import registry
from sparkctl.transport.docker import registry_auth
from sparkctl.transport.image_identity import identity_of_inspect, short
from sparkctl.transport.redact import redact

REC = json.loads((Path(__file__).parent / "recorded" / "image_transport" / "distribution-lab.json").read_text())
IMAGE = REC["image"]
REG = registry.Reference.parse(IMAGE).registry
TAG_ANSWER, INDEX_ANSWER = REC["answers"]["tag"], REC["answers"]["index"]
DIGEST = TAG_ANSWER["Descriptor"]["digest"]
PULLED = REC["inspect"]["tag"]  # the head's image, pulled by tag: docker recorded the tag's manifest
GOOD = identity_of_inspect(PULLED)
LAB = inventory()
INV = LAB.model_copy(update={"runtime": LAB.runtime.model_copy(update={"image": IMAGE})})
HOSTS = ("head", "worker", "offload")


def side_loaded(doc: dict) -> dict:
    """The same image as `docker load` leaves it (the classic store records no pull)."""
    return {**doc, "RepoDigests": []}


def api_error(e: dict) -> docker.errors.APIError:
    """A refusal as docker-py raises it (NotFound for a 404, as its client does)."""
    response = requests.Response()
    response.status_code = e["status"]
    cls = docker.errors.NotFound if e["status"] == 404 else docker.errors.APIError
    return cls(f"{e['status']} Server Error", response=response, explanation=e["explanation"])


MISSING, DEAD = REC["errors"]["missing"], REC["errors"]["unreachable"]
UNAUTHORIZED = {"status": 401, "explanation": "unauthorized: authentication required"}  # distribution errcode UNAUTHORIZED


class Engine:
    """A docker-py client whose inspect_distribution replays the recorded answers."""

    def __init__(self, answer, needs_login: bool = False):
        self.answer, self.needs_login, self.asked = answer, needs_login, []
        self.api = self

    def inspect_distribution(self, image, auth_config=None):
        self.asked.append((image, auth_config))
        if self.needs_login and not auth_config:
            raise api_error(UNAUTHORIZED)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def replay(answer) -> tuple:
    """An `ask` for ImagesStep answering from the recorded head dockerd, and the list of what it was asked."""
    asked: list = []

    def ask(ctx, host, image):
        asked.append((host, image))
        return registry.ask_dockerd(Engine(answer).api, image, f"{host}'s dockerd")

    return ask, asked


def this_machine(answer=None):
    """This machine's registry lookup: unreachable (the laptop offline), or a fixed answer."""
    calls: list = []

    def resolve(image, **kw):
        calls.append(image)
        if answer is None:
            raise registry.RegistryUnreachable(f"registry {REG} did not answer: ConnectError: [Errno 101] Network is unreachable")
        return answer

    return resolve, calls


def facts(docs: dict, containers: dict | None = None):
    """Each node's image probe answering `docs[host]` (and, given, its engine container running that docker ID)."""
    out = {}
    for h in HOSTS:
        secs = {"image__0": inspect_section(docs.get(h), IMAGE)}
        if containers is not None:
            secs["containers"] = sec(json.dumps([container_json(h, render(INV).expected_hash(NAMES[h]), image_id=containers[h])]))
        if h == "head":
            secs["health"] = sec("HTTP/1.1 200 OK")
        out[h] = host_facts(INV, h, **secs)
    return out


def plan(docs: dict, ask, resolve, containers: dict | None = None, **options):
    ctx = RunContext(inventory=INV, fleet=None, facts=facts(docs, containers), options=RunOptions(**options), check_mode=True)
    step = ImagesStep(resolve, ask)
    return step.plan(ctx), ctx, step


# the recorded answers


def test_the_dockerds_answer_is_the_manifest_digest_docker_records_when_it_pulls_the_tag():
    got = registry.from_distribution(TAG_ANSWER, "head's dockerd")
    assert got.manifest_digest == DIGEST and not got.index and not got.identity  # a digest, not an image
    assert fact_of_inspect(IMAGE, PULLED).pulled_as(DIGEST)  # RepoDigests: what the pull was asked as
    assert not fact_of_inspect(IMAGE, side_loaded(PULLED)).pulled_as(DIGEST)


def test_an_index_answer_lists_its_platforms_and_a_pull_by_that_tag_records_the_index_digest():
    got = registry.from_distribution(INDEX_ANSWER, "head's dockerd")
    assert got.index and got.platforms == ("linux/amd64", "linux/arm64/v8")
    assert registry.has_platform(got, "linux/arm64") and not registry.has_platform(got, "linux/riscv64")
    pulled = fact_of_inspect(REC["index_image"], REC["inspect"]["index"])  # the offload host pulled the index tag
    assert pulled.pulled_as(got.manifest_digest) and pulled.key == GOOD  # the index's digest, the same image


def test_a_missing_tag_is_the_registrys_answer_and_a_dead_registry_is_unreachable():
    with pytest.raises(registry.TagNotFound) as missing:
        registry.ask_dockerd(Engine(api_error(MISSING)), f"{REG}/sparkctl/vllm-sim:nope", "head's dockerd")
    assert MISSING["explanation"] in missing.value.message
    with pytest.raises(registry.RegistryUnreachable) as dead:
        registry.ask_dockerd(Engine(api_error(DEAD)), IMAGE, "head's dockerd")
    assert dead.value.message.startswith("head's dockerd could not reach the registry")
    assert DEAD["explanation"] in dead.value.message  # docker's own words


# up --check from a control machine that cannot reach the registry


def test_check_plans_the_pull_from_the_heads_answer_without_this_machine():
    ask, asked = replay(TAG_ANSWER)
    resolve, calls = this_machine()  # this machine: offline
    plans, ctx, _ = plan({"head": PULLED, "worker": None, "offload": side_loaded(PULLED)}, ask, resolve)
    assert asked == [("head", IMAGE)] and calls == []  # one question, to the head's dockerd
    assert plans["head"].empty
    assert (
        f"{short(GOOD)} already current in the registry (tag = manifest {short(DIGEST)}, from head's dockerd)"
        in plans["head"].reason
    )
    assert plans["offload"].empty  # side-loaded: the same image as the head's, pulled as the tag's manifest
    (c,) = plans["worker"].changes
    assert c.action == "pull" and c.data["pull"] == IMAGE and c.data["want"] == GOOD
    assert c.summary.startswith(f"pull {IMAGE} (missing; tag = manifest {short(DIGEST)}, from head's dockerd)")
    assert c.data["source"] in ("head", "offload")  # if the pull fails, a verified node's copy
    assert ctx.outputs.image_ids == {h: {IMAGE: GOOD} for h in HOSTS}


def test_a_manifest_no_node_holds_is_pulled_everywhere_and_check_says_the_engine_restarts():
    ask, _ = replay(TAG_ANSWER)
    resolve, calls = this_machine()
    other = side_loaded({**PULLED, "RootFS": {**PULLED["RootFS"], "Layers": [*PULLED["RootFS"]["Layers"], "sha256:" + "e" * 64]}})
    running = {h: other["Id"] for h in HOSTS}
    plans, ctx, _ = plan({h: other for h in HOSTS}, ask, resolve, containers=running)
    assert calls == [f"{IMAGE}@{DIGEST}"] * 2  # this machine, for the config, once per platform: offline
    for h in HOSTS:
        (c,) = plans[h].changes
        assert c.action == "pull" and c.data["want"] is None and c.data["manifest"] == DIGEST
        assert "no node holds it yet: the pull tells what it is" in c.summary
        assert ctx.outputs.image_ids[h] == {IMAGE: unknown_until_pulled(DIGEST)}
    reason = RuntimeStep().plan(ctx)["head"].reason  # --check: the engine restarts on what the pull brings
    assert f"runs image {short(other['Id'])}, the node now has {short(DIGEST)}" in reason


def test_a_side_loaded_cluster_is_proven_by_what_this_machine_reads_of_the_manifest():
    ask, _ = replay(TAG_ANSWER)
    resolve, calls = this_machine(registry.Resolved(DIGEST, PULLED["Id"], GOOD))
    plans, _, _ = plan({h: side_loaded(PULLED) for h in HOSTS}, ask, resolve)
    assert all(p.empty and not p.blocked for p in plans.values()), {h: p.reason for h, p in plans.items()}
    assert calls and all(c == f"{IMAGE}@{DIGEST}" for c in calls)  # asked for the config by digest


def test_the_heads_dockerd_cut_off_this_machine_answers_and_says_why():
    ask, _ = replay(api_error(DEAD))
    resolve, calls = this_machine(registry.Resolved(DIGEST, PULLED["Id"], GOOD))
    plans, _, _ = plan({"head": PULLED, "worker": None, "offload": PULLED}, ask, resolve)
    assert calls == [IMAGE, IMAGE]  # per platform (arm64 Sparks, the amd64 offload host), as before
    (c,) = plans["worker"].changes
    assert c.action == "pull"
    assert f"tag = manifest {short(DIGEST)}, from this machine, as head's dockerd could not reach the registry {REG}" in c.summary


def test_neither_reaching_the_registry_is_said_with_both_reasons_and_the_fix():
    ask, _ = replay(api_error(DEAD))
    resolve, _ = this_machine()
    plans, _, _ = plan({"head": PULLED, "worker": None, "offload": PULLED}, ask, resolve)
    blocked = plans["worker"].blocked
    assert f"neither head's dockerd nor this machine reached the registry {REG}" in blocked
    assert DEAD["explanation"] in blocked and "Network is unreachable" in blocked
    assert f"`docker pull {IMAGE}` on head; `docker login` there for a private registry" in blocked
    assert not any(p.changes for p in plans.values())


def test_a_missing_tag_answered_to_the_head_is_not_asked_again_from_here():
    ask, _ = replay(api_error(MISSING))
    resolve, calls = this_machine(registry.Resolved(DIGEST, PULLED["Id"], GOOD))
    plans, _, _ = plan({h: PULLED for h in HOSTS}, ask, resolve)
    assert calls == []
    assert "is not in the registry (head's dockerd" in plans["head"].reason  # agreement, not verified


# a private registry: the node's own `docker login`


class Session:
    """A HostSession's `run` answering from the node's docker config and credential helper."""

    def __init__(self, config: dict, helper: dict | None = None):
        self.config, self.helper, self.ran = config, helper, []

    def run(self, command, timeout=None, *, stdin=None, on_line=None):
        self.ran.append((command, stdin))
        if isinstance(command, list) and command[0].startswith("docker-credential-"):
            ok = self.helper is not None
            return SimpleNamespace(ok=ok, stdout=json.dumps(self.helper) if ok else "", stderr="")
        return SimpleNamespace(ok=True, stdout=json.dumps(self.config), stderr="")

    def docker(self):
        return self.engine


def test_a_refused_question_is_asked_again_with_the_nodes_docker_login():
    login = base64.b64encode(b"alice:registry-password-123").decode()
    session = Session({"auths": {REG: {"auth": login}}})
    session.engine = Engine(TAG_ANSWER, needs_login=True)
    ctx = RunContext(inventory=INV, fleet={"head": session}, facts={})  # type: ignore[arg-type]
    got = ask_node(ctx, "head", IMAGE)
    assert got.manifest_digest == DIGEST and got.via == "head's dockerd (with head's docker login)"
    assert session.engine.asked[1][1] == {"username": "alice", "password": "registry-password-123", "serveraddress": REG}
    assert "registry-password-123" not in redact("docker said: registry-password-123")  # never printed


def test_the_nodes_credential_helper_answers_for_docker_hub():
    session = Session({"credsStore": "pass"}, helper={"ServerURL": "https://index.docker.io/v1/", "Username": "<token>",
                                                      "Secret": "hub-identity-token-0123456789"})  # fmt: skip
    assert registry_auth(session, "docker.io") == {"identitytoken": "hub-identity-token-0123456789"}
    assert session.ran[1] == (["docker-credential-pass", "get"], b"https://index.docker.io/v1/")  # the CLI's key for Hub
    assert registry_auth(Session({}), REG) is None  # no login there: docker-py's own choice
