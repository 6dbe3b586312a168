"""TLS building blocks in process: settings checks, the server context per setting, the reloading context,
BrokerConfig's TLS block, the client context (hostname validation, insecure mode), and the peer certificate an
in-process broker keeps on ServerCnx and the admin helper reads from an HTTPS request."""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

import aiohttp
import pytest
import trustme
from aiohttp import web

from quasar.broker.admin import peer_certificate_der
from quasar.broker.app import BrokerApp
from quasar.broker.config import BrokerConfig
from quasar.client import AsyncClient, AuthenticationTLS, ConnectError
from quasar.client.tls import client_ssl_context
from quasar.security import ReloadingServerContext, TlsConfigError, TlsSettings, build_server_context

from .conftest import Pki


def _settings(pki: Pki, **kwargs: object) -> TlsSettings:
    return TlsSettings(certificate_file_path=str(pki.cert), key_file_path=str(pki.key), **kwargs)  # type: ignore[arg-type]


def test_settings_are_checked():
    with pytest.raises(TlsConfigError, match="tls_certificate_file_path and tls_key_file_path"):
        TlsSettings(certificate_file_path="", key_file_path="k.pem")
    with pytest.raises(TlsConfigError, match="tls_protocols: unknown"):
        TlsSettings(certificate_file_path="c", key_file_path="k", protocols=("SSLv3",))
    with pytest.raises(TlsConfigError, match="needs tls_trust_certs_file_path"):
        TlsSettings(certificate_file_path="c", key_file_path="k", require_trusted_client_cert_on_connect=True)
    assert isinstance(TlsConfigError("x"), ValueError)


def test_server_context_follows_the_settings(pki: Pki):
    assert build_server_context(_settings(pki)).verify_mode == ssl.CERT_NONE
    trusted = _settings(pki, trust_certs_file_path=str(pki.ca))
    assert build_server_context(trusted).verify_mode == ssl.CERT_OPTIONAL
    insecure = _settings(pki, trust_certs_file_path=str(pki.ca), allow_insecure_connection=True)
    assert build_server_context(insecure).verify_mode == ssl.CERT_NONE
    required = _settings(pki, trust_certs_file_path=str(pki.ca), require_trusted_client_cert_on_connect=True)
    assert build_server_context(required).verify_mode == ssl.CERT_REQUIRED
    context = build_server_context(_settings(pki, protocols=("TLSv1.3", "TLSv1.2")))
    assert (context.minimum_version, context.maximum_version) == (
        ssl.TLSVersion.TLSv1_2,
        ssl.TLSVersion.TLSv1_3,
    )
    context = build_server_context(_settings(pki, ciphers=("ECDHE-RSA-AES128-GCM-SHA256",)))
    tls12 = {c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert tls12 == {"ECDHE-RSA-AES128-GCM-SHA256"}


def test_server_context_errors_name_the_setting_and_file(pki: Pki, tmp_path: Path):
    with pytest.raises(TlsConfigError, match=r"tls_certificate_file_path.*missing\.pem"):
        build_server_context(
            TlsSettings(certificate_file_path=str(tmp_path / "missing.pem"), key_file_path=str(pki.key))
        )
    with pytest.raises(TlsConfigError, match="tls_key_file_path"):  # a key that is not the certificate's
        build_server_context(
            TlsSettings(certificate_file_path=str(pki.cert), key_file_path=str(pki.other_key))
        )
    with pytest.raises(TlsConfigError, match="tls_trust_certs_file_path"):
        build_server_context(_settings(pki, trust_certs_file_path=str(tmp_path / "none.pem")))
    with pytest.raises(TlsConfigError, match="OpenSSL names"):
        build_server_context(_settings(pki, ciphers=("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",)))


def test_reloading_context_reloads_only_changed_and_valid_files(pki: Pki, caplog: pytest.LogCaptureFixture):
    reloading = ReloadingServerContext(_settings(pki))
    assert not reloading.check() and reloading.reloads == 0  # nothing changed
    pki.cert.write_text("garbage")
    with caplog.at_level(logging.WARNING, logger="quasar.security.tls"):
        assert not reloading.check()
    assert "cannot be reloaded" in caplog.text and reloading.reloads == 0
    pki.cert.write_bytes(pki.other_cert.read_bytes())
    pki.key.write_bytes(pki.other_key.read_bytes())
    assert reloading.check() and reloading.reloads == 1
    assert not reloading.check()  # the same files again: nothing to do


async def test_reloaded_certificate_serves_new_handshakes(pki: Pki):
    reloading = ReloadingServerContext(_settings(pki))
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=reloading.context)
    port = server.sockets[0].getsockname()[1]

    async def issuer_cn(cafile: Path) -> bool:
        context = ssl.create_default_context(cafile=str(cafile))
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        except ssl.SSLError:
            return False
        writer.close()
        return True

    try:
        assert await issuer_cn(pki.ca) and not await issuer_cn(pki.other_ca)
        pki.cert.write_bytes(pki.other_cert.read_bytes())
        pki.key.write_bytes(pki.other_key.read_bytes())
        assert reloading.check()
        assert await issuer_cn(pki.other_ca) and not await issuer_cn(pki.ca)
    finally:
        server.close()
        await server.wait_closed()


def test_broker_config_tls_block(pki: Pki):
    with pytest.raises(ValueError, match="tls_certificate_file_path"):
        BrokerConfig(broker_service_port_tls=6651)
    with pytest.raises(ValueError, match="web_service_port_tls"):
        BrokerConfig(web_service_port_tls=70000, tls_certificate_file_path="c", tls_key_file_path="k")
    with pytest.raises(ValueError, match="tls_cert_refresh_check_duration_sec"):
        BrokerConfig(tls_cert_refresh_check_duration_sec=0)
    config = BrokerConfig.from_mapping(
        {
            "broker_service_port_tls": 0,
            "tls_certificate_file_path": str(pki.cert),
            "tls_key_file_path": str(pki.key),
            "tls_protocols": "TLSv1.3, TLSv1.2",  # broker.conf's comma-separated form
            "tls_ciphers": ["ECDHE-RSA-AES128-GCM-SHA256"],
        }
    )
    assert config.tls_enabled and config.tls_protocols == ("TLSv1.3", "TLSv1.2")
    assert config.tls_settings().ciphers == ("ECDHE-RSA-AES128-GCM-SHA256",)
    assert not BrokerConfig().tls_enabled


async def _serve_tls(cert: trustme.LeafCert) -> asyncio.Server:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(context)
    return await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=context)


async def test_client_context_validates_host_names_when_asked(pki: Pki, tmp_path: Path):
    server = await _serve_tls(pki.ca_obj.issue_cert("broker.example"))  # no SAN for 127.0.0.1
    port = server.sockets[0].getsockname()[1]

    async def handshake(**options: object) -> None:
        context = client_ssl_context(authentication=None, **options)  # type: ignore[arg-type]
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="127.0.0.1")
        writer.close()

    try:
        with pytest.raises(ssl.SSLCertVerificationError, match="IP address mismatch"):
            await handshake(
                trust_certs_file_path=str(pki.ca), allow_insecure_connection=False, validate_hostname=True
            )
        await handshake(
            trust_certs_file_path=str(pki.ca), allow_insecure_connection=False, validate_hostname=False
        )
        with pytest.raises(ssl.SSLCertVerificationError):  # an untrusted CA
            await handshake(
                trust_certs_file_path=str(pki.other_ca),
                allow_insecure_connection=False,
                validate_hostname=False,
            )
        await handshake(trust_certs_file_path=None, allow_insecure_connection=True, validate_hostname=True)
    finally:
        server.close()
        await server.wait_closed()
    with pytest.raises(ValueError, match="tls_trust_certs_file_path"):
        client_ssl_context(
            trust_certs_file_path=str(tmp_path / "x.pem"),
            allow_insecure_connection=False,
            validate_hostname=False,
            authentication=None,
        )
    with pytest.raises(ValueError, match="client certificate"):
        AsyncClient(
            "pulsar+ssl://127.0.0.1:1", authentication=AuthenticationTLS(tmp_path / "c", tmp_path / "k")
        )


async def test_peer_certificate_reaches_server_cnx_and_the_admin_helper(pki: Pki, tmp_path: Path):
    config = BrokerConfig(
        port=0,
        admin_port=0,
        data_dir=tmp_path / "data",
        commit_log_file_size=256 * 1024,
        rocketmq_enabled=False,
        broker_service_port_tls=0,
        tls_certificate_file_path=str(pki.cert),
        tls_key_file_path=str(pki.key),
        tls_trust_certs_file_path=str(pki.ca),
    )
    client_der = ssl.PEM_cert_to_DER_cert(pki.client_cert.read_text())
    app = BrokerApp(config)

    async def no_connections() -> None:  # the broker has seen the previous client go
        for _ in range(500):
            if not app.connections:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the broker still holds a closed client's connection")

    await app.start()
    try:
        assert app.service_url_tls.startswith("pulsar+ssl://") and app.web_service_url_tls == ""
        auth = AuthenticationTLS(pki.client_cert, pki.client_key)
        async with AsyncClient(
            app.service_url_tls, tls_trust_certs_file_path=str(pki.ca), authentication=auth
        ) as c:
            await c.get_topic_partitions("persistent://public/default/peer")
            assert [cnx.peer_certificate_der for cnx in app.connections] == [client_der]
        await no_connections()
        async with AsyncClient(app.service_url_tls, tls_trust_certs_file_path=str(pki.ca)) as c:
            await c.get_topic_partitions("persistent://public/default/peer")
            assert [cnx.peer_certificate_der for cnx in app.connections] == [None]  # optional: none given
        await no_connections()
        async with AsyncClient(app.service_url) as c:  # the plain listener
            await c.get_topic_partitions("persistent://public/default/peer")
            assert [cnx.peer_certificate_der for cnx in app.connections] == [None]
        rogue = AuthenticationTLS(pki.rogue_client_cert, pki.rogue_client_key)
        async with AsyncClient(
            app.service_url_tls,
            tls_trust_certs_file_path=str(pki.ca),
            authentication=rogue,
            operation_timeout_seconds=1,
        ) as c:
            with pytest.raises(ConnectError):  # a certificate that is given must be trusted
                await c.get_topic_partitions("persistent://public/default/peer")
    finally:
        await app.stop()

    # the admin helper, on an HTTPS site with the same kind of context
    async def show(request: web.Request) -> web.Response:
        der = peer_certificate_der(request)
        return web.json_response({"der": None if der is None else der.hex()})

    admin = web.Application()
    admin.router.add_get("/peer", show)
    runner = web.AppRunner(admin)
    await runner.setup()
    reloading = ReloadingServerContext(_settings(pki, trust_certs_file_path=str(pki.ca)))
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=reloading.context)
    await site.start()
    port = runner.addresses[0][1]
    try:
        with_cert = ssl.create_default_context(cafile=str(pki.ca))
        with_cert.load_cert_chain(str(pki.client_cert), str(pki.client_key))
        async with aiohttp.ClientSession() as session:
            async with session.get(f"https://127.0.0.1:{port}/peer", ssl=with_cert) as response:
                assert (await response.json())["der"] == client_der.hex()
            no_cert = ssl.create_default_context(cafile=str(pki.ca))
            async with session.get(f"https://127.0.0.1:{port}/peer", ssl=no_cert) as response:
                assert (await response.json())["der"] is None
    finally:
        await runner.cleanup()


def test_cluster_members_register_and_answer_their_tls_urls():
    from quasar.broker.cluster.model import BrokerInfo, LookupKind
    from quasar.broker.cluster.ownership import ClusterOwnership

    info = BrokerInfo(
        cluster="c",
        group="g",
        broker_id=0,
        service_url="pulsar://h:6650",
        web_service_url="http://h:8080",
        service_url_tls="pulsar+ssl://h:6651",
        web_service_url_tls="https://h:8443",
    )
    assert BrokerInfo.from_json(info.to_json()) == info
    assert info.to_json()["webServiceUrlTls"] == "https://h:8443"
    answer = ClusterOwnership._answer(info, "", LookupKind.REDIRECT, authoritative=True)
    assert (answer.service_url_tls, answer.web_service_url_tls) == ("pulsar+ssl://h:6651", "https://h:8443")
    old = {
        k: v for k, v in info.to_json().items() if k != "webServiceUrlTls"
    }  # registered by an older broker
    assert BrokerInfo.from_json(old).web_service_url_tls == ""
