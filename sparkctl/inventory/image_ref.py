"""An image reference as docker reads it: the grammar of distribution/reference (regexp.go), the
library dockerd and the registry parse `docker pull` names with:

    reference  := name [ ":" tag ] [ "@" digest ]
    name       := [domain "/"] path-component ["/" path-component]*   (at most 255 characters)
    domain     := (domain-component ["." domain-component]* | "[" IPv6 "]") [":" port]

A reference outside it (spaces, `;`, capitals in the path) would be refused by docker on every
node, after the fabric and the caches were already changed: the inventory refuses it first.
"""

from __future__ import annotations

import re

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[(?:[a-fA-F0-9:]+)\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"

REFERENCE = re.compile(rf"^(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$", re.ASCII)
NAME_MAX = 255  # distribution/reference: NameTotalLengthMax
DIGEST_HEX = {"sha256": 64, "sha384": 96, "sha512": 128}  # the algorithms opencontainers/go-digest registers

EXAMPLE = "registry.example.com:5000/team/vllm:0.33"


def problem(ref: str) -> str | None:
    """Why `ref` is not an image reference docker accepts, or None when it is one."""
    m = REFERENCE.match(ref)
    if m is None:
        bad = sorted({c for c in ref if not (c.isascii() and (c.isalnum() or c in "._-/:@[]"))})
        why = f" (it holds {', '.join(repr(c) for c in bad)})" if bad else ""
        if not bad and any(c.isupper() for c in ref.split("/", 1)[-1].split(":", 1)[0]):
            why = " (the repository path must be lower case; only the registry host may have capitals)"
        return f"{ref!r} is not an image reference{why}: write [registry[:port]/]path[:tag][@digest], e.g. {EXAMPLE}"
    if len(m.group("name")) > NAME_MAX:
        return f"the image name is {len(m.group('name'))} characters; docker allows at most {NAME_MAX}"
    if m.group("digest"):
        algorithm, _, hex_ = m.group("digest").partition(":")
        if DIGEST_HEX.get(algorithm) != len(hex_):  # go-digest's Parse: a known algorithm, its full length
            return f"{m.group('digest')!r} is not a digest docker pulls: write sha256: and 64 hex digits"
    return None
