"""Keep secrets out of everything sparkctl prints, logs or stores.

Two nets: values of keys that look secret (TOKEN, KEY, SECRET, PASSWORD, ...) are masked
wherever they appear in structured data, and known token shapes are masked inside free text
(command lines, remote stderr). Secret values seen in structured data are also remembered,
so the same value leaking into a log line later is masked too.
"""

from __future__ import annotations

import re
import threading
from typing import Any

MASK = "***"

# A key is secret when one of its words (split on _ - .) is one of these. Whole words only, so
# `max_num_batched_tokens` or `total_output_tokens` (counts, not secrets) are left alone.
SECRET_WORDS = {"token", "secret", "password", "passwd", "apikey", "credential", "credentials", "auth", "authorization"}
SECRET_PAIRS = {("api", "key"), ("private", "key"), ("access", "key"), ("secret", "key")}

# Free-text shapes: KEY=value / KEY: value with a secret-looking key, bearer tokens,
# Hugging Face and OpenAI-style tokens, PEM private key blocks.
_TEXT_PATTERNS = [
    re.compile(
        r"(?P<k>\b(?:[A-Za-z0-9]+_)*(?:TOKEN|SECRET|PASSW(?:OR)?D|API_?KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIALS?)(?:_[A-Za-z0-9]+)*\b\s*[=:]\s*)"
        r"(?P<v>\"[^\"]*\"|'[^']*'|[^\s,;]+)",
        re.I,
    ),
    re.compile(r"(?P<k>\bBearer\s+)(?P<v>[A-Za-z0-9._~+/=-]+)", re.I),
    re.compile(r"(?P<k>)(?P<v>\bhf_[A-Za-z0-9]{16,}\b)"),
    re.compile(r"(?P<k>)(?P<v>\bsk-[A-Za-z0-9_-]{16,}\b)"),
    re.compile(r"(?P<k>)(?P<v>-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----)", re.S),
]

_known_secrets: set[str] = set()
_lock = threading.Lock()


def remember_secret(value: str) -> None:
    """Mask this exact value wherever it appears from now on (values shorter than 4 chars are ignored)."""
    if value and len(value) >= 4:
        with _lock:
            _known_secrets.add(value)


def is_secret_key(key: str) -> bool:
    words = [w for w in re.split(r"[_\-.]+", key.lower()) if w]
    return any(w in SECRET_WORDS for w in words) or any(p in SECRET_PAIRS for p in zip(words, words[1:]))


def redact(text: str) -> str:
    """Mask secrets in free text."""
    if not text:
        return text
    for pat in _TEXT_PATTERNS:
        text = pat.sub(lambda m: m.group("k") + MASK, text)
    with _lock:
        known = sorted(_known_secrets, key=len, reverse=True)
    for secret in known:
        text = text.replace(secret, MASK)
    return text


def redact_obj(obj: Any) -> Any:
    """Mask secrets in JSON-like data: secret-named keys lose their value, strings are text-redacted."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if isinstance(k, str) and is_secret_key(k) and isinstance(v, (str, int, float)) and v != "":
                remember_secret(str(v))
                out[k] = MASK
            else:
                out[k] = redact_obj(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    if isinstance(obj, str):
        return redact(obj)
    return obj
