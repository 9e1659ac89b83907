"""The identity S3 listing and deletion act under: the table's own FileIO settings, by pyiceberg's names.

``backends.s3_storage`` picks the backend for an ``s3://`` location. By default a boto3 client built from the
properties pyiceberg's FileIO reads (its constants, with the same ``s3.*`` over ``client.*``
precedence): endpoint, static keys and session token, region, profile, role assumption (STS,
refreshed before expiry), proxy, connect and request timeouts, path-style or virtual addressing,
anonymous access, and server-side encryption of what it writes. The properties are the table's
``io.properties``, so credentials a REST catalog vends with each table load are the ones used, renewed
by loading the table again shortly before they end (``vended``).

boto3 cannot follow remote signing (``s3.signer``, or ``s3.remote-signing-enabled``): such a table is
listed and deleted through the filesystem its pyiceberg FileIO builds (``FileIOStorage``), as is any
table whose properties set ``iceberg-maint.s3-client`` to ``file-io``.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

import boto3
import botocore.session
from botocore import UNSIGNED
from botocore.config import Config
from botocore.credentials import (
    AssumeRoleCredentialFetcher,
    CredentialProvider,
    Credentials,
    DeferredRefreshableCredentials,
)
from botocore.exceptions import ProfileNotFound
from pyiceberg.io import (
    AWS_ACCESS_KEY_ID,
    AWS_PROFILE_NAME,
    AWS_REGION,
    AWS_ROLE_ARN,
    AWS_ROLE_SESSION_NAME,
    AWS_SECRET_ACCESS_KEY,
    AWS_SESSION_TOKEN,
    S3_ACCESS_KEY_ID,
    S3_ANONYMOUS,
    S3_CONNECT_TIMEOUT,
    S3_ENDPOINT,
    S3_FORCE_VIRTUAL_ADDRESSING,
    S3_PROFILE_NAME,
    S3_PROXY_URI,
    S3_REGION,
    S3_REQUEST_TIMEOUT,
    S3_ROLE_ARN,
    S3_ROLE_SESSION_NAME,
    S3_SECRET_ACCESS_KEY,
    S3_SERVER_SIDE_ENCRYPTION,
    S3_SESSION_TOKEN,
    S3_SIGNER,
    S3_SSE_KMS_KEY_ID,
)
from pyiceberg.utils.properties import get_first_property_value, property_as_bool

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.fs.vended import renewing_credentials

#: Iceberg's (Java and REST) switch for remote signing; pyiceberg 0.12 reads only ``s3.signer``.
S3_REMOTE_SIGNING_ENABLED = "s3.remote-signing-enabled"
#: This project's switch: ``boto3`` (default) or ``file-io`` (list and delete through the FileIO's filesystem).
S3_CLIENT = "iceberg-maint.s3-client"
S3_CLIENTS = ("boto3", "file-io")


def uses_file_io_filesystem(props: Mapping[str, Any]) -> bool:
    choice = props.get(S3_CLIENT) or "boto3"
    if choice not in S3_CLIENTS:
        raise InvalidInputError(f"property {S3_CLIENT}={choice!r}: expected one of {', '.join(S3_CLIENTS)}")
    # A request signed by a remote service is something boto3 alone cannot produce.
    return choice == "file-io" or bool(props.get(S3_SIGNER)) or _bool(props, S3_REMOTE_SIGNING_ENABLED)


def s3_client(props: Mapping[str, Any]) -> Any:
    """A boto3 S3 client with the identity and settings pyiceberg's FileIO takes from ``props``."""
    endpoint = props.get(S3_ENDPOINT) or None
    session = _session(props)
    config = _client_config(props)
    if _bool(props, S3_ANONYMOUS):
        config = config.merge(Config(signature_version=UNSIGNED))
    virtual = props.get(S3_FORCE_VIRTUAL_ADDRESSING)
    # pyarrow's rule: virtual addressing when forced, path style for a custom endpoint, else the default.
    if virtual not in (None, ""):
        config = config.merge(
            Config(s3={"addressing_style": "virtual" if _bool(props, S3_FORCE_VIRTUAL_ADDRESSING) else "path"})
        )
    elif endpoint:
        config = config.merge(Config(s3={"addressing_style": "path"}))
    return session.client("s3", endpoint_url=endpoint, config=config)


def put_arguments(props: Mapping[str, Any]) -> dict[str, str]:
    """Extra ``PutObject`` arguments for the files this project writes (server-side encryption)."""
    arguments: dict[str, str] = {}
    if encryption := props.get(S3_SERVER_SIDE_ENCRYPTION):
        arguments["ServerSideEncryption"] = str(encryption)
    if kms_key := props.get(S3_SSE_KMS_KEY_ID):
        arguments["SSEKMSKeyId"] = str(kms_key)
    return arguments


def _bool(props: Mapping[str, Any], name: str) -> bool:
    try:
        return property_as_bool(dict(props), name, False)
    except ValueError as exc:
        raise InvalidInputError(f"property {name}={props.get(name)!r}: expected true or false") from exc


def _seconds(props: Mapping[str, Any], name: str) -> float | None:
    value = props.get(name)
    if value in (None, ""):
        return None
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"property {name}={value!r}: expected a number of seconds") from exc


def _client_config(props: Mapping[str, Any]) -> Config:
    """Retries, pool size, proxy and timeouts: the same for the S3 client and the STS client behind a role."""
    kwargs: dict[str, Any] = {"retries": _retries(), "max_pool_connections": 32}
    if proxy := props.get(S3_PROXY_URI):
        kwargs["proxies"] = {"http": proxy, "https": proxy}
    if (connect := _seconds(props, S3_CONNECT_TIMEOUT)) is not None:
        kwargs["connect_timeout"] = connect
    if (request := _seconds(props, S3_REQUEST_TIMEOUT)) is not None:
        kwargs["read_timeout"] = request
    return Config(**kwargs)


def _session(props: Mapping[str, Any]) -> boto3.Session:
    """Static keys over a profile over the default chain; a role, when set, assumed with those. Vended keys
    a table load recorded (``vended``) renew themselves, unless a role is assumed with them."""
    region = get_first_property_value(dict(props), S3_REGION, AWS_REGION)
    role_arn = get_first_property_value(dict(props), S3_ROLE_ARN, AWS_ROLE_ARN)
    if not role_arn and (vended := renewing_credentials(props)) is not None:
        return _session_with(vended.method, lambda: vended, region)
    profile = get_first_property_value(dict(props), S3_PROFILE_NAME, AWS_PROFILE_NAME)
    core = _botocore_session()
    try:
        base = _boto3_session(
            botocore_session=core,
            aws_access_key_id=get_first_property_value(dict(props), S3_ACCESS_KEY_ID, AWS_ACCESS_KEY_ID),
            aws_secret_access_key=get_first_property_value(dict(props), S3_SECRET_ACCESS_KEY, AWS_SECRET_ACCESS_KEY),
            aws_session_token=get_first_property_value(dict(props), S3_SESSION_TOKEN, AWS_SESSION_TOKEN),
            region_name=region,
            profile_name=profile,
        )
        core.get_scoped_config()  # a missing profile fails here, not at the first request
    except ProfileNotFound as exc:
        raise InvalidInputError(
            f"property {S3_PROFILE_NAME}={profile!r}: no such profile in the AWS config or credentials file"
        ) from exc
    if not role_arn:
        return base
    source = base.get_credentials()
    if source is None:
        raise InvalidInputError(
            f"property {S3_ROLE_ARN}={role_arn!r}: no credentials to assume the role with "
            f"(set {S3_ACCESS_KEY_ID} and {S3_SECRET_ACCESS_KEY}, {S3_PROFILE_NAME}, or AWS_* variables)"
        )
    extra: dict[str, str] = {}
    if session_name := get_first_property_value(dict(props), S3_ROLE_SESSION_NAME, AWS_ROLE_SESSION_NAME):
        extra["RoleSessionName"] = session_name
    # STS is reached as boto3 reaches it (AWS_ENDPOINT_URL_STS and the AWS config apply), through the proxy.
    fetcher = AssumeRoleCredentialFetcher(
        client_creator=functools.partial(base.client, region_name=base.region_name, config=_client_config(props)),
        source_credentials=source,
        role_arn=role_arn,
        extra_args=extra,
    )
    method = "assume-role"
    return _session_with(
        method,
        lambda: DeferredRefreshableCredentials(refresh_using=fetcher.fetch_credentials, method=method),
        base.region_name,
    )


def _session_with(method: str, credentials: Callable[[], Credentials], region: str | None) -> boto3.Session:
    """A session whose only credentials are ``credentials()`` (which renew themselves), ahead of the default chain."""
    session = _botocore_session()
    session.get_component("credential_provider").insert_before("env", _Renewing(method, credentials))
    return _boto3_session(botocore_session=session, region_name=region)


# Parsing botocore's service models takes 0.2 to 1 s of CPU a session (a client a storage backend: several a
# run), so every session reads them through one loader, which keeps them parsed. Credentials, profiles
# and settings are still resolved afresh for each session.
_loader_lock = threading.Lock()
_loader: Any = None


def _botocore_session() -> botocore.session.Session:
    global _loader
    session = botocore.session.Session()
    with _loader_lock:
        if _loader is None:
            _loader = session.get_component("data_loader")
        else:
            session.register_component("data_loader", _loader)
    return session


def _boto3_session(botocore_session: botocore.session.Session, **kwargs: Any) -> boto3.Session:
    """``boto3.Session`` over a session of ``_botocore_session``."""
    session = boto3.Session(botocore_session=botocore_session, **kwargs)
    with _loader_lock:
        # Each boto3 session appends its own data folder to the loader's search path: keep one of each.
        paths = _loader.search_paths
        paths[:] = dict.fromkeys(paths)
    return session


class _Renewing(CredentialProvider):
    """Credentials that fetch themselves again shortly before they expire (an assumed role's, vended ones)."""

    def __init__(self, method: str, credentials: Callable[[], Credentials]) -> None:
        super().__init__()
        self.METHOD = method
        self._credentials = credentials

    def load(self) -> Credentials:
        return self._credentials()


def _retries() -> dict[str, Any]:
    """botocore's adaptive mode with 8 retries, unless the standard AWS_RETRY_MODE / AWS_MAX_ATTEMPTS say otherwise."""
    retries: dict[str, Any] = {}
    # botocore reads those variables only for what this leaves unset.
    if not os.environ.get("AWS_RETRY_MODE"):
        retries["mode"] = "adaptive"
    if not os.environ.get("AWS_MAX_ATTEMPTS"):
        retries["max_attempts"] = 8
    return retries
