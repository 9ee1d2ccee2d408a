"""What the hub lists for a checkpoint: its commit and every file's size and digest.

Asked from this machine with the hub's own client (huggingface_hub's model_info with files
metadata; the same include/exclude matching `hf download` applies), only when no node holds a
verified copy of the inventory's revision: a no-op `up` never contacts the hub. The token is read
from sparkctl's environment (weights.access_env) and never written anywhere.
"""

from __future__ import annotations

import os

from sparkctl.errors import SparkctlError
from sparkctl.facts.weights import ManifestFile
from sparkctl.inventory.models import HubCheckpoint, Weights
from sparkctl.weights.manifest import Manifest

TIMEOUT = 20.0  # seconds for the hub's answer (a listing of ~50 files)


class HubError(SparkctlError):
    """The hub could not list the checkpoint: not found, gated, unreachable. Nothing was changed."""


def token(w: Weights) -> str | None:
    return os.environ.get(w.access_env) or None


def manifest(w: Weights, ckpt: HubCheckpoint, field: str = "weights") -> Manifest:
    """The hub's manifest of `ckpt` (the files its include/exclude select). Raises HubError with
    the inventory field and the fix."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    from huggingface_hub.utils import filter_repo_objects

    from sparkctl.transport.guard import check_url

    check_url(w.endpoint, "the model hub (weights.endpoint)")
    tok = token(w)
    where = f"{ckpt.repo} on {w.endpoint}"
    try:
        info = HfApi(endpoint=w.endpoint, token=tok or False).model_info(
            ckpt.repo, revision=ckpt.revision, files_metadata=True, timeout=TIMEOUT
        )
    except GatedRepoError:
        raise _gated(w, ckpt, field) from None
    except RevisionNotFoundError:
        raise HubError(
            f"{field}.revision: {ckpt.revision!r} is not a branch, tag or commit of {where}",
            fix=f"use a commit id or branch listed under the repo's 'Files and versions' ({w.endpoint}/{ckpt.repo}/tree/main)",
        ) from None
    except RepositoryNotFoundError:
        raise HubError(
            f"{field}.repo: {where} does not exist{'' if tok else ' (or is private: $' + w.access_env + ' is not set)'}",
            fix=f"check the spelling of {field}.repo (owner/name); for a private repo export {w.access_env}=<token>",
        ) from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "no status"
        raise HubError(
            f"{where}: the hub answered {status}: {str(exc).splitlines()[0][:200]}",
            fix="try again later, or check weights.endpoint",
        ) from None
    except Exception as exc:
        # connection refused, DNS, TLS, a timeout: OSErrors, or httpx's own errors (not OSErrors)
        if isinstance(exc, OSError) or type(exc).__module__.startswith(("httpx", "httpcore")):
            raise HubError(
                f"cannot reach the model hub {w.endpoint} from this machine: {type(exc).__name__}: {str(exc)[:160]}",
                fix="check the network (or weights.endpoint: a mirror this machine reaches)",
            ) from None
        raise
    if info.gated and info.siblings:
        # the hub lists a gated repo to anyone and refuses its files: try one with the token, before a byte moves
        _check_file_access(w, ckpt, str(info.sha), info.siblings[0].rfilename, field)
    siblings = list(
        filter_repo_objects(
            info.siblings or [],
            allow_patterns=ckpt.include or None,
            ignore_patterns=ckpt.exclude or None,
            key=lambda s: s.rfilename,
        )
    )
    files = {}
    for s in siblings:
        if s.lfs is not None:
            files[s.rfilename] = ManifestFile(int(s.lfs.size), sha256=s.lfs.sha256)
        else:
            files[s.rfilename] = ManifestFile(int(s.size or 0), git=s.blob_id)
    if not files:
        raise HubError(
            f"{field}.include/exclude select no file of {where}@{ckpt.revision} ({len(info.siblings or [])} in the repo)",
            fix="loosen the patterns (they match paths in the repo, e.g. '*.safetensors', 'original/*')",
        )
    return Manifest(ckpt.repo, ckpt.revision, str(info.sha), files)


def _check_file_access(w: Weights, ckpt: HubCheckpoint, commit: str, path: str, field: str) -> None:
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError

    tok = token(w)
    try:
        get_hf_file_metadata(
            hf_hub_url(ckpt.repo, path, revision=commit, endpoint=w.endpoint), token=tok or False, timeout=TIMEOUT
        )
    except (GatedRepoError, HfHubHTTPError) as exc:
        status = exc.response.status_code if exc.response is not None else None
        if not isinstance(exc, GatedRepoError) and status not in (401, 403):
            raise
        raise _gated(w, ckpt, field) from None


def _gated(w: Weights, ckpt: HubCheckpoint, field: str) -> HubError:
    why = f"the token in ${w.access_env} is not approved for it" if token(w) else f"${w.access_env} is not set"
    return HubError(
        f"{field}.repo: {ckpt.repo} on {w.endpoint} is gated and {why}",
        fix=f"accept the repo's terms on the hub with your account, then export {w.access_env}=<a token of that "
        "account> where you run sparkctl (it is handed to the download on the node, never stored)",
    )
