"""Access keys: the clients' ``MQv2-HMAC-SHA1`` signature, and the accounts of an ACL file with
the topics and groups each may use (``access`` checks every name a request gives against them).

The file (TOML)::

    [[accounts]]
    access_key = "app1"
    secret_key = "..."
    topics = ["Orders", "Payments"]   # may send to and receive from these ("*": any)
    groups = ["billing"]              # may consume as these groups ("*": any)
    admin = false                     # remoting: may create/delete topics and groups, change
                                      # the broker's config (RocketMQ's admin codes)

The signature is HMAC-SHA1(secret key, the ``x-mq-date-time`` header's bytes) in hex (either
case); the access key is the ``Credential`` value up to its first ``/`` (BROKER.md §1). Without
an ACL file every request is allowed and the header is ignored.

Every refusal (UNAUTHORIZED, FORBIDDEN) is logged by ``log_refusal`` (WARNING,
``rocketstore.broker.auth``) with the call, the client and why: the official clients show only
"failed to fetch topic route", so the server's log is where an operator learns which key or
permission is wrong.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rocketstore.errors import Refusal, RequestRefusedError, StoreConfigError

__all__ = ["Account", "Acl", "log_refusal"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str
    topics: frozenset[str]
    groups: frozenset[str]
    admin: bool = False

    def allows_topic(self, topic: str) -> bool:
        return topic in self.topics or "*" in self.topics

    def allows_group(self, group: str) -> bool:
        return group in self.groups or "*" in self.groups


class Acl:
    def __init__(self, accounts: Mapping[str, Account]) -> None:
        self._accounts = dict(accounts)

    @classmethod
    def from_file(cls, path: str | Path) -> Acl:
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover
            import tomli as tomllib  # type: ignore[import-not-found,no-redef,unused-ignore]
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise StoreConfigError(f"ACL file {str(path)!r}: {exc}") from None
        accounts = {}
        for i, entry in enumerate(data.get("accounts", [])):
            try:
                ak, sk = entry["access_key"], entry["secret_key"]
                topics, groups = entry.get("topics", []), entry.get("groups", [])
            except (KeyError, TypeError):
                raise StoreConfigError(
                    f"ACL file {str(path)!r}: account {i} needs access_key and secret_key"
                ) from None
            if not all(isinstance(v, str) and v for v in (ak, sk)) or not all(
                isinstance(x, list) and all(isinstance(t, str) for t in x) for x in (topics, groups)
            ):
                raise StoreConfigError(
                    f"ACL file {str(path)!r}: account {i}: keys are text, topics and groups lists"
                )
            admin = entry.get("admin", False)
            if not isinstance(admin, bool):
                raise StoreConfigError(f"ACL file {str(path)!r}: account {i}: admin is true or false")
            accounts[ak] = Account(ak, sk, frozenset(topics), frozenset(groups), admin)
        if not accounts:
            raise StoreConfigError(f"ACL file {str(path)!r} lists no [[accounts]]")
        return cls(accounts)

    def account(self, access_key: str) -> Account | None:
        """The account of ``access_key``, None when the file has none."""
        return self._accounts.get(access_key)

    def authenticate(self, metadata: Mapping[str, str]) -> Account:
        """The account that signed the request; RequestRefusedError UNAUTHORIZED if none did."""
        header = metadata.get("authorization", "")
        scheme, _, rest = header.partition(" ")
        if scheme != "MQv2-HMAC-SHA1":
            raise RequestRefusedError(
                Refusal.UNAUTHORIZED, "the request carries no MQv2-HMAC-SHA1 authorization"
            )
        fields = {}
        for part in rest.split(","):
            name, _, value = part.strip().partition("=")
            fields[name] = value
        ak = fields.get("Credential", "").split("/", 1)[0]
        account = self._accounts.get(ak)
        if account is None:
            raise RequestRefusedError(Refusal.UNAUTHORIZED, f"unknown access key {ak!r}")
        date = metadata.get("x-mq-date-time", "")
        expected = hmac.new(account.secret_key.encode(), date.encode(), hashlib.sha1).hexdigest()
        if not date or not hmac.compare_digest(expected, fields.get("Signature", "").lower()):
            raise RequestRefusedError(
                Refusal.UNAUTHORIZED, f"the signature of access key {ak!r} does not match"
            )
        return account


def log_refusal(call: str, client: str, exc: RequestRefusedError) -> None:
    """One log line for a request refused for its keys or permissions (other refusals are the
    client's to report)."""
    if exc.reason in (Refusal.UNAUTHORIZED, Refusal.FORBIDDEN):
        log.warning("refused %s of client %s: %s: %s", call, client, exc.reason.name, exc.message)
