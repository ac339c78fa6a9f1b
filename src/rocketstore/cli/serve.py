"""``rocketstore serve``: the store as a RocketMQ 5 broker for the official clients."""

from __future__ import annotations

from pathlib import Path

import click

from rocketstore.cli.common import store_config
from rocketstore.storage.paths import looks_like_store

__all__ = ["serve_command"]


@click.command("serve")
@click.argument("store_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--listen", default="127.0.0.1:8081", show_default=True, help="HOST:PORT to serve gRPC on, or off."
)
@click.option(
    "--remoting",
    default="127.0.0.1:10911",
    show_default=True,
    help="HOST:PORT to serve RocketMQ's remoting protocol (the broker) on, or off "
    "(default port: broker.conf's listenPort when set).",
)
@click.option(
    "--namesrv",
    default="127.0.0.1:9876",
    show_default=True,
    help="HOST:PORT to serve the name server on (routes point at --remoting), or off.",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="broker.conf (or .toml): the store's settings and the broker's (autoCreateTopicEnable ...).",
)
@click.option("--create", is_flag=True, help="Create the store if STORE_DIR holds none.")
@click.option("--json", "as_json", is_flag=True, help="Log JSON lines instead of text.")
@click.option(
    "--tls-cert", type=click.Path(exists=True, dir_okay=False), help="PEM certificate chain: serve TLS."
)
@click.option(
    "--tls-key", type=click.Path(exists=True, dir_okay=False), help="PEM private key of --tls-cert."
)
@click.option(
    "--acl", "acl_file", type=click.Path(exists=True, dir_okay=False), help="ACL file (TOML): access keys."
)
@click.option("--metrics", "metrics_address", metavar="HOST:PORT", help="Serve Prometheus metrics here.")
@click.option(
    "--advertise", metavar="HOST:PORT", help="The address clients are told to use (default: --listen)."
)
@click.option(
    "--role",
    type=click.Choice(["ASYNC_MASTER", "SYNC_MASTER", "SLAVE"], case_sensitive=False),
    help="Replication role (brokerRole); a SLAVE takes its master's bytes and refuses clients' writes.",
)
@click.option("--ha-port", type=click.IntRange(0, 65535), help="Serve replication (RocketMQ's HA) on PORT.")
@click.option("--master", "master_address", metavar="HOST:PORT", help="A SLAVE's master HA address.")
@click.pass_context
def serve_command(
    ctx: click.Context,
    store_dir: Path,
    listen: str,
    remoting: str,
    namesrv: str,
    config_file: Path | None,
    create: bool,
    as_json: bool,
    tls_cert: str | None,
    tls_key: str | None,
    acl_file: str | None,
    metrics_address: str | None,
    advertise: str | None,
    role: str | None,
    ha_port: int | None,
    master_address: str | None,
) -> int:
    """Serve STORE_DIR to RocketMQ clients until SIGTERM or Ctrl-C, then close it cleanly: RocketMQ 5
    clients over gRPC (--listen), RocketMQ 4.x clients, mqadmin and the benchmarks over RocketMQ's
    remoting protocol (--namesrv is their namesrvAddr; routes point at --remoting).

    \b
    Example:
      rocketstore serve ./store --create
    RocketMQ 5 clients use 127.0.0.1:8081 as their endpoint; 4.x clients and mqadmin use
    namesrvAddr 127.0.0.1:9876. See docs/broker.md and docs/remoting.md.
    """
    from rocketstore.broker import BrokerConfig, serve
    from rocketstore.broker.config import load_settings
    from rocketstore.broker.serve import configure_logging, log_file_of
    from rocketstore.errors import StoreConfigError

    if config_file is not None:
        base, broker = load_settings(config_file)
    else:
        base, broker = ctx.find_root().obj, BrokerConfig()

    def address(value: str) -> str | None:
        return None if value.strip().lower() == "off" else value

    changes: dict[str, object] = {"listen": address(listen), "namesrv": address(namesrv)}
    if config_file is not None:
        changes["config_file"] = str(Path(config_file).resolve())
    given = ctx.get_parameter_source("remoting") is not click.core.ParameterSource.DEFAULT
    # the default gives way to broker.conf's listenPort
    changes["remoting"] = address(remoting) if given or broker.remoting is None else broker.remoting
    for name, value in (
        ("tls_cert", tls_cert),
        ("tls_key", tls_key),
        ("acl_file", acl_file),
        ("advertise", advertise),
    ):
        if value is not None:
            changes[name] = value
    try:
        broker = broker.replace(**changes)
    except StoreConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if broker.listen is None and broker.remoting is None:
        raise click.ClickException("nothing to serve: --listen and --remoting are both off")
    if looks_like_store(store_dir):
        cfg = store_config(ctx, store_dir) if config_file is None else base
    elif not create:
        state = "is not a store directory" if store_dir.exists() else "does not exist"
        raise click.ClickException(f"{str(store_dir)!r} {state} (--create makes a new store)")
    elif store_dir.exists() and any(p.name != "logs" for p in store_dir.iterdir()):  # (a failed start's)
        raise click.ClickException(
            f"{store_dir} is not a store directory (and not empty): refusing to write into it"
        )
    else:
        cfg = base
    replication: dict[str, object] = {}
    if role is not None:
        replication["broker_role"] = role.upper()
    if ha_port is not None:
        replication["ha_listen_port"] = ha_port
    if master_address is not None:
        replication["ha_master_address"] = master_address
    if replication:
        cfg = cfg.replace(**replication)
    log_file = log_file_of(store_dir, broker)
    try:
        configure_logging(as_json, log_file=log_file)
    except OSError as exc:
        raise click.ClickException(f"cannot write the log file {log_file}: {exc.strerror or exc}") from None
    return serve(store_dir, broker, cfg, metrics_address=metrics_address)
