"""The Spark connector's TLS and authentication options: checked and converted on the driver, picklable, and
used end to end by its broker handle (binary protocol over pulsar+ssl, admin REST over https) against a real
TLS broker that requires client certificates."""

from __future__ import annotations

import base64
import pickle

import pytest

from quasar.client import AuthenticationBasic, AuthenticationTLS, AuthenticationToken
from quasar.spark._client import BrokerClient
from quasar.spark.errors import OptionError
from quasar.spark.options import parse_read, parse_write
from quasar.spark.passthrough import admin_headers, client_kwargs

from .conftest import Pki, TlsBrokerFactory

pytestmark = pytest.mark.timeout(120)

TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


def test_tls_and_auth_options_become_client_arguments():
    config = parse_read(
        {
            "service.url": "pulsar+ssl://broker:6651",
            "topic": "t",
            "quasar.client.tlsTrustCertsFilePath": "/ca.pem",
            "quasar.client.tlsAllowInsecureConnection": "false",
            "quasar.client.tlsHostnameVerificationEnable": "true",
            "quasar.client.authPluginClassName": TOKEN_PLUGIN,
            "quasar.client.authParams": "token:abc.def",
        }
    )
    assert config.admin_url == "https://broker:8443"  # the TLS admin port by default for pulsar+ssl
    kwargs = client_kwargs(config.client_conf)
    auth = kwargs.pop("authentication")
    assert isinstance(auth, AuthenticationToken) and auth.auth_data() == b"abc.def"
    assert kwargs == {
        "tls_trust_certs_file_path": "/ca.pem",
        "tls_allow_insecure_connection": False,
        "tls_validate_hostname": True,
    }
    assert parse_write({"service.url": "pulsar://b:6650", "topic": "t"}).admin_url == "http://b:8080"


def test_admin_calls_carry_pulsar_http_credentials():
    assert admin_headers(AuthenticationToken("jwt")) == {"Authorization": "Bearer jwt"}
    basic = admin_headers(AuthenticationBasic("alice", "pw"))
    assert basic == {"Authorization": "Basic " + base64.b64encode(b"alice:pw").decode()}
    assert admin_headers(AuthenticationTLS("/c", "/k")) == {} and admin_headers(None) == {}


def test_bad_auth_options_fail_on_the_driver():
    with pytest.raises(OptionError, match="authPluginClassName"):
        client_kwargs((("authparams", "token:x"),))
    with pytest.raises(OptionError, match="unknown authentication plugin"):
        client_kwargs((("authpluginclassname", "kerberos"), ("authparams", "x")))
    with pytest.raises(OptionError, match="userId and password"):
        BrokerClient("pulsar://h:1", "http://h:2", (("authpluginclassname", "basic"), ("authparams", "{}")))


def test_broker_handle_over_tls_with_a_client_certificate(tls_broker_factory: TlsBrokerFactory, pki: Pki):
    broker = tls_broker_factory(
        tls_trust_certs_file_path=str(pki.ca), tls_require_trusted_client_cert_on_connect=True
    )
    assert broker.service_url_tls is not None and broker.admin_url_tls is not None
    conf = (
        ("tlstrustcertsfilepath", str(pki.ca)),
        ("tlshostnameverificationenable", "true"),
        ("authpluginclassname", "org.apache.pulsar.client.impl.auth.AuthenticationTls"),
        ("authparams", f"tlsCertFile:{pki.client_cert},tlsKeyFile:{pki.client_key}"),
    )
    handle = pickle.loads(pickle.dumps(BrokerClient(broker.service_url_tls, broker.admin_url_tls, conf)))
    topic = "persistent://public/default/spark-tls"
    producer = handle.producer(topic, ())
    producer.send(b"row", None, None, None, None)
    producer.flush()
    assert handle.topic_partitions(topic) == [topic]  # admin REST over https with the client certificate
    assert handle.last_position(topic).entry_id >= 0
    producer.close()
    handle.client().close()  # the process-wide cached client of this (test-only) broker URL
