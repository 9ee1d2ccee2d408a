"""Keep secrets out of everything sparkctl prints, logs or stores.

Three nets:
- by name: values of keys that look secret are masked wherever they appear in structured data.
  Lower-case schema keys count when one of their words is a secret word (`api_key`, `password`,
  not `max_num_batched_tokens` or `host_key_policy`); environment-style names (UPPER_CASE) count
  when they merely *contain* KEY, TOKEN, SECRET, PASSWORD, PASS, CREDENTIAL or AUTH
  (`WANDB_KEY`, `DB_PASS`, `MY_AUTHTOKEN`), and so do names the inventory marks secret
  (`runtime.secret_env`). The same names are masked in free text as `NAME=value`.
- by value: credentials inside URLs (`postgres://user:PASSWORD@db`), bearer tokens, known token
  shapes (hf_, sk-, ghp_, glpat-, xox?-, nvapi-, AKIA..., JWTs) and, for environment values,
  anything token-shaped (long, random-looking).
- by memory: secret values seen once (the inventory's env, at load) are masked wherever the same
  text shows up later (a command line, remote stderr, a log line).

Output shows `***`. State files (applied.json) are written with `digests=True`: the mask then
carries a salted scrypt fingerprint of the value (`***scrypt:<32 hex>`), so a changed secret is
still seen as a change while the value itself is never stored.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import threading
from collections import Counter
from typing import Any, Callable, Iterable, Mapping, Union

MASK = "***"
DIGEST_SALT = b"sparkctl-secret\0"  # keeps digests from matching a plain sha256 of the value elsewhere

# A lower-case key is secret when one of its words (split on _ - .) is one of these. Whole words
# only, so `max_num_batched_tokens` or `total_output_tokens` (counts, not secrets) are left alone.
SECRET_WORDS = {
    "token",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "apikey",
    "credential",
    "credentials",
    "auth",
    "authorization",
}
SECRET_PAIRS = {("api", "key"), ("private", "key"), ("access", "key"), ("secret", "key")}
# An environment-style name is secret when it contains one of these anywhere (the list).
ENV_NAME_PARTS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "CREDENTIAL", "AUTH")
# ...except inside these words, which name settings, not secrets (TOKENIZERS_PARALLELISM).
ENV_NAME_NOT_SECRET = ("TOKENIZER",)
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")

# Values remembered for free-text masking must be long enough not to mask ordinary text
# ("8192", "true"); shorter secrets are still masked by their name.
REMEMBER_MIN = 8

_TOKEN_SHAPES = [
    r"hf_[A-Za-z0-9]{16,}",  # Hugging Face
    r"sk-[A-Za-z0-9_-]{16,}",  # OpenAI-style
    r"gh[pousr]_[A-Za-z0-9]{20,}",
    r"github_pat_[A-Za-z0-9_]{20,}",  # GitHub
    r"glpat-[A-Za-z0-9_-]{16,}",  # GitLab
    r"xox[abprs]-[A-Za-z0-9-]{10,}",  # Slack
    r"nvapi-[A-Za-z0-9_-]{16,}",  # NVIDIA NGC
    r"AKIA[0-9A-Z]{16}",  # AWS access key id
    r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JWT
]
_TOKEN_RE = re.compile(r"\b(?:" + "|".join(_TOKEN_SHAPES) + r")\b")

_VALUE = r"(?P<v>\"[^\"]*\"|'[^']*'|[^\s,;]+)"  # a value in free text: quoted, or up to a space , or ;
# Free-text shapes: KEY=value / KEY: value with a secret-looking key, credentials in URLs,
# bearer tokens, known token shapes, PEM private key blocks.
_TEXT_PATTERNS = [
    re.compile(
        # (not the inventory key `secret_env: [NAMES]`, which lists names, never values)
        r"(?P<k>\b(?!secret_env\b)(?:[A-Za-z0-9]+_)*(?:TOKEN|SECRET|PASSW(?:OR)?D|API_?KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIALS?)(?:_[A-Za-z0-9]+)*\b\s*[=:]\s*)"
        + _VALUE,
        re.I,
    ),
    re.compile(r"(?P<k>\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)(?P<v>[^/\s@]+)(?=@)"),  # scheme://user:PASSWORD@
    re.compile(r"(?P<k>\bBearer\s+)(?P<v>[A-Za-z0-9._~+/=-]+)", re.I),
    re.compile(r"(?P<k>)(?P<v>" + _TOKEN_RE.pattern + ")"),
    re.compile(r"(?P<k>)(?P<v>-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----)", re.S),
]
# environment assignments (case-sensitive: NAME=value in a docker run line, a log, an error),
# masked when NAME is secret (is_secret_env_name)
_ENV_ASSIGNMENT = re.compile(r"(?P<k>\b(?P<name>[A-Z_][A-Z0-9_]*)=)" + _VALUE)
_URL_PASSWORD = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:(?P<v>[^/\s@]+)@")

_known_secrets: set[str] = set()
_secret_names: set[str] = set()  # masked in free text as NAME=value too
_lock = threading.Lock()


@functools.lru_cache(maxsize=256)
def digest(value: str, salt: str = "") -> str:
    """A secret's fingerprint: enough to see it changed, costly to guess it back from. scrypt (RFC
    7914: 16 MiB and ~50 ms a guess, where a SHA-256 took a microsecond) and 128 bits: a state file
    read by someone else is no fast oracle for a short key or password. Deterministic, so the same
    secret gives the same fingerprint in every run and on every machine; `salt` (the cluster's name,
    `state_digests`) makes one guess good for one cluster's files only."""
    salted = DIGEST_SALT + salt.encode()
    return "scrypt:" + hashlib.scrypt(value.encode(), salt=salted, n=1 << 14, r=8, p=1, dklen=16).hex()


def state_digests(cluster: str) -> Callable[[str], str]:
    """The fingerprint a cluster's state files keep of a secret: salted with the cluster's name too."""
    return functools.partial(digest, salt=f":{cluster}")


def legacy_digest(value: str) -> str:
    """The fingerprint sparkctl wrote before issue 39 (48 bits of a salted SHA-256): only to match a
    record written then (reload.restore_secrets), never written again."""
    return "sha256:" + hashlib.sha256(DIGEST_SALT + value.encode()).hexdigest()[:12]


Digests = Union[bool, Callable[[str], str]]  # True: digest(); a function: that fingerprint instead


def _mask(value: str, digests: Digests) -> str:
    if not digests:
        return MASK
    return MASK + (digests(value) if callable(digests) else digest(value))


def remember_secret(value: str) -> None:
    """Mask this exact value wherever it appears from now on (short values are left to name rules)."""
    if value and len(value) >= REMEMBER_MIN:
        with _lock:
            _known_secrets.add(value)


def remember_secret_name(name: str) -> None:
    """Treat this key / environment name as secret from now on (an inventory's runtime.secret_env)."""
    with _lock:
        _secret_names.add(name)


def is_secret_env_name(name: str) -> bool:
    """An environment-style (UPPER_CASE) name that contains KEY, TOKEN, SECRET, PASS(WORD),
    CREDENTIAL or AUTH: WANDB_KEY, DB_PASS, MY_AUTHTOKEN; not TOKENIZERS_PARALLELISM."""
    if not _ENV_NAME.match(name):
        return False
    for word in ENV_NAME_NOT_SECRET:
        name = name.replace(word, "")
    return any(p in name for p in ENV_NAME_PARTS)


def is_secret_key(key: str) -> bool:
    """A key whose value is secret: by its words, by its (environment-style) name, or marked."""
    if key in _secret_names or is_secret_env_name(key):
        return True
    words = [w for w in re.split(r"[_\-.]+", key.lower()) if w]
    return any(w in SECRET_WORDS for w in words) or any(p in SECRET_PAIRS for p in zip(words, words[1:]))


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def looks_like_token(value: str) -> bool:
    """A value shaped like a credential: a known token format, a URL with a password, a long hex
    string, or a long random-looking mix of upper case, lower case and digits (no dots, spaces or
    word-like runs), as API keys and generated passwords are; paths, hosts, versions, model ids,
    flags and identifiers such as FLASHINFER_B12X_MOE are not."""
    if _TOKEN_RE.fullmatch(value) or _URL_PASSWORD.match(value):
        return True
    if len(value) < 24 or not re.fullmatch(r"[A-Za-z0-9+/=_\-]+", value) or value.startswith("/"):
        return False
    if re.fullmatch(r"[0-9a-fA-F]{32,}", value.replace("-", "")):
        return True
    mixed = any(c.isupper() for c in value) and any(c.islower() for c in value) and any(c.isdigit() for c in value)
    wordy = re.search(r"[a-z]{6,}", value) is not None  # six lower-case letters in a row: words, not noise
    return mixed and not wordy and _entropy(value) >= 3.5


def secret_env(env: Mapping[str, str], marked: Iterable[str] = ()) -> dict[str, str]:
    """The entries of an environment whose values are secret: marked, secret-named or token-shaped
    (for a URL with a password, the password is what is secret)."""
    marked = set(marked)
    out = {}
    for name, value in env.items():
        url = _URL_PASSWORD.match(value)
        if url and name not in marked and not is_secret_key(name):
            out[name] = url.group("v")
        elif name in marked or is_secret_key(name) or looks_like_token(value):
            out[name] = value
    return out


def remember_env(env: Mapping[str, str], marked: Iterable[str] = ()) -> None:
    """Register an environment's secrets (names and values) so every later output masks them."""
    for name in marked:
        remember_secret_name(name)
    for name, secret in secret_env(env, marked).items():
        if secret == env[name]:
            remember_secret_name(name)
        remember_secret(secret)


def redact(text: str, digests: Digests = False) -> str:
    """Mask secrets in free text (with `digests`, each mask carries the value's digest)."""
    if not text:
        return text
    with _lock:
        names = "|".join(re.escape(n) for n in sorted(_secret_names))
        known = sorted(_known_secrets, key=len, reverse=True)

    def sub(m: re.Match) -> str:
        value = m.group("v")
        if value.startswith(MASK):  # already masked by an earlier pattern
            return m.group(0)
        return m.group("k") + _mask(value.strip("'\""), digests)

    marked = [re.compile(rf"(?P<k>\b(?:{names})=)" + _VALUE)] if names else []  # runtime.secret_env names
    for pat in _TEXT_PATTERNS + marked:
        text = pat.sub(sub, text)
    text = _ENV_ASSIGNMENT.sub(lambda m: sub(m) if is_secret_env_name(m.group("name")) else m.group(0), text)
    for secret in known:
        if secret in text:
            text = text.replace(secret, _mask(secret, digests))
    return text


def redact_obj(obj: Any, digests: Digests = False) -> Any:
    """Mask secrets in JSON-like data: secret-named keys lose their value, strings are text-redacted.
    With `digests` (state files), masks carry the value's digest so a change stays visible."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if isinstance(k, str) and is_secret_key(k) and isinstance(v, (str, int, float)) and v != "":
                if str(v).startswith(MASK):  # masked already (a record read back)
                    out[k] = v
                else:
                    remember_secret(str(v))
                    out[k] = _mask(str(v), digests)
            else:
                out[k] = redact_obj(v, digests)
        return out
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v, digests) for v in obj]
    if isinstance(obj, str):
        return redact(obj, digests)
    return obj
