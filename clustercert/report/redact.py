"""Stable pseudonyms for hostnames, user names and process ids in the customer-facing copy of a report."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Redactor"]

_USER = re.compile(r"(?P<pre>\b(?:user|username|uid|owner|login)\s*[=:]\s*['\"]?)(?P<name>[A-Za-z_][\w.-]*)",
                   re.IGNORECASE)
_HOME = re.compile(r"(?P<pre>/(?:home|Users)/)(?P<name>[^/\s'\"<>]+)")
_PID = re.compile(r"(?P<pre>\b(?:pid|process id|process)\s*[=:#]?\s*)(?P<name>\d+)\b", re.IGNORECASE)
_FIELD_KINDS = {"pid": "pid", "user": "user", "username": "user", "uid": "user", "hostname": "host", "host": "host"}
_BRACKET_PID = re.compile(r"(?P<pre>\b[a-z][\w.-]*\[)(?P<name>\d+)(?=\])")


class Redactor:
    """Replaces known hostnames, user names and process ids by keyed pseudonyms (`host-1a2b3c`).

    The same name and the same secret always give the same pseudonym, so a customer can follow a node
    through the report without learning its name; the auditor's report keeps the names.
    """

    def __init__(self, secret: bytes, hosts: Iterable[str]) -> None:
        self._secret = secret
        names = sorted({h for h in hosts if h}, key=lambda h: (-len(h), h))
        # A hostname is also found inside run ids and file names (`nccl-pair-gb-r4-n10-gb-r7-n10`,
        # `pair/gb-r1-n02-gb-r2-n02.log`): only a letter or digit next to it makes it part of another word.
        # Longest names first, so `gb-r1-n10` is never read as `gb-r1-n1` followed by `0`.
        self._hosts = (re.compile("|".join(rf"(?<![A-Za-z0-9]){re.escape(h)}(?![A-Za-z0-9])" for h in names))
                       if names else None)
        self.replaced: dict[str, str] = {}

    def pseudonym(self, kind: str, name: str) -> str:
        digest = hmac.new(self._secret, f"{kind}:{name}".encode(), hashlib.sha256).hexdigest()[:6]
        out = f"{kind}-{digest}"
        self.replaced[name] = out
        return out

    def text(self, value: str) -> str:
        if self._hosts is not None:
            value = self._hosts.sub(lambda m: self.pseudonym("host", m.group(0)), value)
        for pattern, kind in ((_HOME, "user"), (_USER, "user"), (_PID, "pid"), (_BRACKET_PID, "pid")):
            value = pattern.sub(self._replacer(kind), value)
        return value

    def _replacer(self, kind: str) -> Callable[[re.Match[str]], str]:
        def replace(m: re.Match[str]) -> str:
            return m.group("pre") + self.pseudonym(kind, m.group("name"))

        return replace

    def __call__(self, data: Any) -> Any:
        """A copy of `data` (JSON-like) with every string and dictionary key redacted."""
        if isinstance(data, str):
            return self.text(data)
        if isinstance(data, dict):
            return {self.text(k) if isinstance(k, str) else k: self._field(k, v) for k, v in data.items()}
        if isinstance(data, list | tuple):
            return [self(v) for v in data]
        return data

    def _field(self, key: Any, value: Any) -> Any:
        kind = _FIELD_KINDS.get(str(key).lower())
        if kind is not None and isinstance(value, str | int) and not isinstance(value, bool) and value != "":
            return self.pseudonym(kind, str(value))
        return self(value)
