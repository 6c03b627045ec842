"""The value stores of ``envreplica.impl.valuestores``, judged by the implementation's own decisions.

The same battery runs against ``EmbeddedStore`` and ``SsmStore`` (moto in
server mode over real HTTP on 127.0.0.1; never moto's in-process patching).
Every read is planned by ``impl.decisions.Decisions.plan_read``, made by
``ask`` and judged by ``Decisions.judge_answer``: each section-4 reason a
store can produce is produced through a real store. The model's reading of
the same answers (``model.store``) is held against it at the end, and the
places where the implementation follows the seed's JavaScript where the
model does not are pinned there.
"""

from __future__ import annotations

import copy

import json
import logging
import threading
from dataclasses import dataclass
from typing import Callable, Optional

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.stub import Stubber

from envreplica.impl.decisions import (
    DECISIONS,
    Answered,
    Fetched,
    NotFound,
    ReadFailed,
    StoreRead,
    legacy_parameter_name,
    staged_parameter_name,
)
from envreplica.impl.valuestores import (
    DEFAULT_SSM_CONFIG,
    EmbeddedStore,
    SsmStore,
    ValueReader,
    ValueStoreError,
    ask,
    put_for_ref,
)
from envreplica.model import store as model_store
from envreplica.model.store import legacy_envelope, staged_envelope
from envreplica.spec.domain import BindingState, Head, LegacyRef, StagedRef, UnavailableReason

PREFIX = "/envreplica-test"
ORG = "org-1"
PROJECT = "proj-1"
KEY = "API_TOKEN"
STAGING_ID = "0f8fad5b-d9cb-469f-a165-70867728950e"
OTHER_STAGING_ID = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
SECRET = "s3cret-value"
REGION = "us-east-1"

R = UnavailableReason


# ---------------------------------------------------------------------------
# Moto in server mode.
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def moto_endpoint():
    """One moto server (a thread serving real HTTP on 127.0.0.1) for the module."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with pytest.MonkeyPatch.context() as mp:
        # A proxy set in the environment must not capture loopback traffic.
        mp.setenv("NO_PROXY", "127.0.0.1,localhost")
        mp.setenv("no_proxy", "127.0.0.1,localhost")
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            yield f"http://{host}:{port}"
        finally:
            server.stop()


def _client(endpoint_url: str, config: Config = DEFAULT_SSM_CONFIG):
    return boto3.client(
        "ssm",
        endpoint_url=endpoint_url,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=copy.deepcopy(config),  # botocore rewrites a config's retries in place
    )


@pytest.fixture(scope="module")
def ssm_client(moto_endpoint):
    return _client(moto_endpoint)


@pytest.fixture
def fresh_ssm(moto_endpoint, ssm_client):
    """The SSM client, over a moto whose state was just reset."""
    requests.post(f"{moto_endpoint}/moto-api/reset", timeout=5).raise_for_status()
    return ssm_client


# A client for a port nothing listens on: every read fails at once.
_FAST_FAIL = Config(connect_timeout=0.5, read_timeout=0.5, retries={"total_max_attempts": 1, "mode": "standard"})


def _closed_port_store() -> SsmStore:
    return SsmStore(client=_client("http://127.0.0.1:1", _FAST_FAIL))


# ---------------------------------------------------------------------------
# One battery, two backends.
# ---------------------------------------------------------------------------


@dataclass
class Backend:
    kind: str  # "embedded" | "ssm"
    store: EmbeddedStore | SsmStore
    raising: Callable[[str], ValueReader]  # a reader whose reads of that name raise

    def put(self, ref, raw: str, key: str = KEY, reported_version: Optional[int] = None) -> str:
        return put_for_ref(self.store, PREFIX, PROJECT, key, ref, raw, reported_version)


@pytest.fixture(params=["embedded", "ssm"])
def backend(request) -> Backend:
    if request.param == "embedded":
        store = EmbeddedStore()

        def raising(name: str) -> ValueReader:
            store.fail(name, "error")
            return store

        return Backend("embedded", store, raising)
    client = request.getfixturevalue("fresh_ssm")
    return Backend("ssm", SsmStore(client=client), lambda name: _closed_port_store())


def _state(ref, key: str = KEY) -> BindingState:
    return BindingState(
        key=key,
        head=Head(revision=1, generation=1, tombstone=False, value_ref=ref),
        binding=None,
        policy_epoch=1,
        listing_generation=1,
    )


def _request(ref, key: str = KEY) -> StoreRead:
    """The read the implementation plans for ``ref`` (so names come from it, not the test)."""
    req = DECISIONS.plan_read(PREFIX, PROJECT, _state(ref, key), True)
    assert isinstance(req, StoreRead)
    return req


def _judge(reader: ValueReader, ref, key: str = KEY) -> Fetched:
    req = _request(ref, key)
    return DECISIONS.judge_answer(ORG, PROJECT, _state(ref, key), req, ask(reader, req))


STAGED = StagedRef(STAGING_ID)
LEGACY = LegacyRef(3)


# -- raw reads --------------------------------------------------------------


def test_is_a_value_reader(backend):
    assert isinstance(backend.store, ValueReader)


def test_staged_found(backend):
    raw = staged_envelope(ORG, PROJECT, KEY, STAGING_ID, SECRET)
    name = backend.put(STAGED, raw)
    assert name == staged_parameter_name(PREFIX, PROJECT, KEY, STAGING_ID)
    assert backend.store.read_staged(name) == raw


def test_staged_missing_is_none(backend):
    backend.put(STAGED, "x")
    assert backend.store.read_staged(staged_parameter_name(PREFIX, PROJECT, KEY, OTHER_STAGING_ID)) is None
    assert backend.store.read_staged(staged_parameter_name(PREFIX, "other-proj", KEY, STAGING_ID)) is None


def test_legacy_found_with_reported_version(backend):
    raw = legacy_envelope(PROJECT, KEY, SECRET)
    name = backend.put(LEGACY, raw)
    assert name == legacy_parameter_name(PREFIX, PROJECT, KEY)
    assert backend.store.read_legacy(name, 3) == (raw, 3)


def test_legacy_version_one(backend):
    raw = legacy_envelope(PROJECT, KEY, SECRET)
    name = backend.put(LegacyRef(1), raw)
    assert backend.store.read_legacy(name, 1) == (raw, 1)


def test_legacy_missing_version_is_none(backend):
    name = backend.put(LEGACY, legacy_envelope(PROJECT, KEY, SECRET))
    assert backend.store.read_legacy(name, 4) is None
    assert backend.store.read_legacy(name, 99) is None


def test_legacy_missing_name_is_none(backend):
    backend.put(LEGACY, legacy_envelope(PROJECT, KEY, SECRET))
    assert backend.store.read_legacy(legacy_parameter_name(PREFIX, PROJECT, "OTHER_KEY"), 3) is None


def test_raising_reader_raises_value_store_error(backend):
    raw = staged_envelope(ORG, PROJECT, KEY, STAGING_ID, SECRET)
    staged = backend.put(STAGED, raw)
    legacy = backend.put(LEGACY, legacy_envelope(PROJECT, KEY, SECRET))
    reader = backend.raising(staged)
    with pytest.raises(ValueStoreError) as exc:
        reader.read_staged(staged)
    assert SECRET not in str(exc.value)
    reader = backend.raising(legacy)
    with pytest.raises(ValueStoreError) as exc:
        reader.read_legacy(legacy, 3)
    assert SECRET not in str(exc.value)


# -- answers, judged by the implementation's decisions ------------------------


def test_ask_shapes(backend):
    backend.put(STAGED, "raw-staged")
    backend.put(LEGACY, "raw-legacy")
    assert ask(backend.store, _request(STAGED)) == Answered("raw-staged")
    assert ask(backend.store, _request(LEGACY)) == Answered("raw-legacy", 3)
    assert ask(backend.store, _request(StagedRef(OTHER_STAGING_ID))) == NotFound()
    assert ask(backend.store, _request(LegacyRef(7))) == NotFound()
    req = _request(STAGED)
    assert ask(backend.raising(req.name), req) == ReadFailed()


def test_staged_installed(backend):
    backend.put(STAGED, staged_envelope(ORG, PROJECT, KEY, STAGING_ID, SECRET))
    assert _judge(backend.store, STAGED) == Fetched(SECRET, None)


def test_legacy_installed(backend):
    backend.put(LEGACY, legacy_envelope(PROJECT, KEY, SECRET))
    assert _judge(backend.store, LEGACY) == Fetched(SECRET, None)


def test_staged_value_missing(backend):
    backend.put(StagedRef(OTHER_STAGING_ID), staged_envelope(ORG, PROJECT, KEY, OTHER_STAGING_ID, SECRET))
    assert _judge(backend.store, STAGED) == Fetched(None, R.VALUE_MISSING)


def test_legacy_value_missing_version(backend):
    backend.put(LegacyRef(2), legacy_envelope(PROJECT, KEY, SECRET))
    assert _judge(backend.store, LEGACY) == Fetched(None, R.VALUE_MISSING)


def test_legacy_value_missing_name(backend):
    assert _judge(backend.store, LEGACY) == Fetched(None, R.VALUE_MISSING)


@pytest.mark.parametrize(
    "org,project,key,staging_id",
    [
        ("org-2", PROJECT, KEY, STAGING_ID),
        (ORG, "proj-2", KEY, STAGING_ID),
        (ORG, PROJECT, "OTHER_KEY", STAGING_ID),
        (ORG, PROJECT, KEY, OTHER_STAGING_ID),
    ],
    ids=["orgId", "projectId", "key", "stagingId"],
)
def test_staged_envelope_mismatch(backend, org, project, key, staging_id):
    backend.put(STAGED, staged_envelope(org, project, key, staging_id, SECRET))
    assert _judge(backend.store, STAGED) == Fetched(None, R.VALUE_ENVELOPE_MISMATCH)


@pytest.mark.parametrize(
    "project,key", [("proj-2", KEY), (PROJECT, "OTHER_KEY")], ids=["projectId", "key"]
)
def test_legacy_envelope_mismatch(backend, project, key):
    backend.put(LEGACY, legacy_envelope(project, key, SECRET))
    assert _judge(backend.store, LEGACY) == Fetched(None, R.VALUE_ENVELOPE_MISMATCH)


def test_staged_wrong_shape_is_envelope_mismatch(backend):
    backend.put(STAGED, legacy_envelope(PROJECT, KEY, SECRET))  # a v1 envelope where a v2 belongs
    assert _judge(backend.store, STAGED) == Fetched(None, R.VALUE_ENVELOPE_MISMATCH)


def test_legacy_version_mismatch(backend):
    if backend.kind == "ssm":
        pytest.skip("real SSM always reports the version asked for: value_version_mismatch cannot occur")
    backend.put(LEGACY, legacy_envelope(PROJECT, KEY, SECRET), reported_version=4)
    assert backend.store.read_legacy(legacy_parameter_name(PREFIX, PROJECT, KEY), 3)[1] == 4
    assert _judge(backend.store, LEGACY) == Fetched(None, R.VALUE_VERSION_MISMATCH)


@pytest.mark.parametrize("ref", [STAGED, LEGACY], ids=["staged", "legacy"])
@pytest.mark.parametrize("raw", ['{"v": 2, "kind": ', "not json", ""], ids=["truncated", "text", "empty"])
def test_malformed_is_value_unavailable(backend, ref, raw):
    if raw == "" and backend.kind == "ssm":
        pytest.skip("SSM refuses empty parameter values")
    backend.put(ref, raw)
    assert _judge(backend.store, ref) == Fetched(None, R.VALUE_UNAVAILABLE)


def test_legacy_wrong_shape_is_value_unavailable(backend):
    backend.put(LEGACY, staged_envelope(ORG, PROJECT, KEY, STAGING_ID, SECRET))  # v2 where a v1 belongs
    assert _judge(backend.store, LEGACY) == Fetched(None, R.VALUE_UNAVAILABLE)


@pytest.mark.parametrize("ref", [STAGED, LEGACY], ids=["staged", "legacy"])
def test_raising_store_is_value_unavailable(backend, ref):
    good = (staged_envelope(ORG, PROJECT, KEY, STAGING_ID, SECRET) if isinstance(ref, StagedRef)
            else legacy_envelope(PROJECT, KEY, SECRET))
    name = backend.put(ref, good)
    assert _judge(backend.store, ref) == Fetched(SECRET, None)
    assert _judge(backend.raising(name), ref) == Fetched(None, R.VALUE_UNAVAILABLE)


def test_key_without_legacy_name(backend):
    """``_TOKEN`` has no legacy parameter name: the replica answers before any read."""
    state = _state(LEGACY, "_TOKEN")
    assert DECISIONS.plan_read(PREFIX, PROJECT, state, True) == Fetched(None, R.VALUE_REFERENCE_INVALID)
    with pytest.raises(ValueError):
        backend.put(LEGACY, legacy_envelope(PROJECT, "_TOKEN", SECRET), key="_TOKEN")
    # A staged reference for the same key has a name, and works.
    backend.put(STAGED, staged_envelope(ORG, PROJECT, "_TOKEN", STAGING_ID, SECRET), key="_TOKEN")
    assert _judge(backend.store, STAGED, "_TOKEN") == Fetched(SECRET, None)


def test_unicode_value_round_trips(backend):
    value = "pässwörd ✓ \"quoted\" \\ 🔑"
    backend.put(STAGED, staged_envelope(ORG, PROJECT, KEY, STAGING_ID, value))
    backend.put(LEGACY, legacy_envelope(PROJECT, KEY, value))
    assert _judge(backend.store, STAGED) == Fetched(value, None)
    assert _judge(backend.store, LEGACY) == Fetched(value, None)


# ---------------------------------------------------------------------------
# The envelope as the seed's JavaScript reads it, and the model's reading.
# ---------------------------------------------------------------------------


def _answer(ref, raw: str, version: Optional[int] = None) -> Fetched:
    req = _request(ref)
    return DECISIONS.judge_answer(ORG, PROJECT, _state(ref), req, Answered(raw, version))


def _staged_doc(**changes) -> str:
    doc = {"v": 2, "kind": "project-env", "orgId": ORG, "projectId": PROJECT, "key": KEY,
           "stagingId": STAGING_ID, "value": SECRET}
    doc.update(changes)
    return json.dumps(doc)


def test_plan_answers_without_a_read():
    tomb = BindingState(KEY, Head(2, 2, True, None), None, 1, 1)
    assert DECISIONS.plan_read(PREFIX, PROJECT, tomb, True) == Fetched(None, R.TOMBSTONE)
    assert DECISIONS.plan_read(PREFIX, PROJECT, _state(STAGED), False) == Fetched(
        None, R.CREDENTIAL_STORE_UNAVAILABLE)
    assert DECISIONS.plan_read(PREFIX, PROJECT, tomb, False) == Fetched(None, R.TOMBSTONE)  # tombstone first
    assert _request(STAGED) == StoreRead(STAGED, staged_parameter_name(PREFIX, PROJECT, KEY, STAGING_ID))
    with pytest.raises(ValueError):
        staged_parameter_name(PREFIX, PROJECT, KEY, "not-a-uuid")


@pytest.mark.parametrize("raw, reason", [
    (_staged_doc(v=2.0), None),  # JavaScript: 2.0 === 2
    (_staged_doc(v=True), R.VALUE_ENVELOPE_MISMATCH),  # true !== 2
    (_staged_doc(v="2"), R.VALUE_ENVELOPE_MISMATCH),
    (_staged_doc(value=7), R.VALUE_ENVELOPE_MISMATCH),
    (_staged_doc(extra=1), R.VALUE_ENVELOPE_MISMATCH),
    ("[]", R.VALUE_ENVELOPE_MISMATCH),
    ("null", R.VALUE_ENVELOPE_MISMATCH),
], ids=["v-2.0", "v-true", "v-string", "value-number", "extra-key", "array", "null"])
def test_staged_envelope_checks(raw, reason):
    expected = Fetched(SECRET, None) if reason is None else Fetched(None, reason)
    assert _answer(STAGED, raw) == expected
    assert _answer(STAGED, raw) == _model_answer(STAGED, raw)  # the model reads these the same way


def test_legacy_version_is_checked_before_the_text_is_parsed():
    """The seed compares ``found.version`` before ``parseStoredProjectEnv`` runs."""
    assert _answer(LEGACY, "{not json", version=4) == Fetched(None, R.VALUE_VERSION_MISMATCH)
    assert _answer(LEGACY, "{not json", version=3) == Fetched(None, R.VALUE_UNAVAILABLE)


@pytest.mark.parametrize("raw", [_staged_doc(extra=float("nan")), _staged_doc(extra=float("inf")),
                                 _staged_doc(v=float("-inf"))], ids=["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(raw):
    """``JSON.parse`` throws on them, so the seed's catch answers ``value_unavailable``."""
    assert "NaN" in raw or "Infinity" in raw
    assert _answer(STAGED, raw) == Fetched(None, R.VALUE_UNAVAILABLE)


def test_huge_integers_parse_as_javascript_numbers():
    """``JSON.parse`` reads every number as a double: 5000 digits is Infinity, not an error."""
    assert _answer(STAGED, _staged_doc()[:-1] + ', "n": ' + "9" * 5000 + "}") == Fetched(
        None, R.VALUE_ENVELOPE_MISMATCH)


def _model_answer(ref, raw: str, version: Optional[int] = None):
    state = _state(ref)
    req = model_store.plan(PREFIX, PROJECT, state, True)
    got = model_store.interpret(ORG, PROJECT, state, req, model_store.Found(raw, version))
    return Fetched(got.value, got.reason)


def test_the_model_reads_the_envelopes_as_the_seed_does():
    """Found by writing the implementation from the seed: the version is compared before the text is parsed,
    and JSON is read as JavaScript reads it (NaN throws; a 5000-digit integer is Infinity)."""
    cases = [(LEGACY, "{not json", 4), (STAGED, _staged_doc(extra=float("nan")), None),
             (STAGED, _staged_doc()[:-1] + ', "n": ' + "9" * 5000 + "}", None)]
    assert [_model_answer(*c) for c in cases] == [_answer(*c) for c in cases]


def test_parameter_names_are_the_models():
    """Both encodings name parameters alike (docs/protocol.md section 4): a store written for one reads for the other."""
    for key in (KEY, "_TOKEN", "A" * 100):
        assert staged_parameter_name(PREFIX, PROJECT, key, STAGING_ID) == model_store.staged_parameter_name(
            PREFIX, PROJECT, key, STAGING_ID)
        assert legacy_parameter_name(PREFIX, PROJECT, key) == model_store.legacy_parameter_name(PREFIX, PROJECT, key)


# ---------------------------------------------------------------------------
# EmbeddedStore only.
# ---------------------------------------------------------------------------


def test_embedded_fail_modes():
    store = EmbeddedStore()
    staged = put_for_ref(store, PREFIX, PROJECT, KEY, STAGED, "a")
    legacy = put_for_ref(store, PREFIX, PROJECT, KEY, LEGACY, "b")
    store.put_legacy(legacy, "c", 4)

    store.fail(legacy, "missing", version=3)
    assert store.read_legacy(legacy, 3) is None
    assert store.read_legacy(legacy, 4) == ("c", 4)

    store.fail(legacy, "error", version=4)
    with pytest.raises(ValueStoreError):
        store.read_legacy(legacy, 4)
    store.put_legacy(legacy, "d", 4)  # a put clears the failure
    assert store.read_legacy(legacy, 4) == ("d", 4)

    store.fail(legacy, "error")  # name-wide: every version, even unwritten ones
    with pytest.raises(ValueStoreError):
        store.read_legacy(legacy, 9)
    store.fail(legacy, "missing")  # name-wide: nothing left
    assert store.read_legacy(legacy, 4) is None

    store.fail(staged, "error")
    with pytest.raises(ValueStoreError):
        store.read_staged(staged)
    store.fail(staged, "missing")
    assert store.read_staged(staged) is None
    store.put(staged, "e")
    assert store.read_staged(staged) == "e"

    store.clear()
    assert store.read_staged(staged) is None


def test_embedded_put_with_version_is_legacy():
    store = EmbeddedStore()
    store.put("/p/projects/x/env/K", "raw", version=2)
    assert store.read_legacy("/p/projects/x/env/K", 2) == ("raw", 2)
    assert store.read_staged("/p/projects/x/env/K") is None


def test_embedded_rejects_bad_arguments():
    store = EmbeddedStore()
    with pytest.raises(ValueError):
        store.fail("n", "boom")
    with pytest.raises(ValueError):
        store.put_legacy("n", "raw", 0)
    with pytest.raises(ValueError):
        store.put_legacy("n", "raw", True)
    with pytest.raises(TypeError):
        store.put("n", b"raw")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        put_for_ref(store, PREFIX, PROJECT, KEY, STAGED, "raw", reported_version=2)


def test_embedded_thread_safety():
    store = EmbeddedStore()
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for j in range(200):
                name = f"/p/n{i}"
                store.put(name, f"{i}:{j}")
                store.put_legacy(name, f"{i}:{j}", j + 1)
                assert store.read_staged(name) == f"{i}:{j}"
                assert store.read_legacy(name, j + 1) == (f"{i}:{j}", j + 1)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# ---------------------------------------------------------------------------
# SsmStore only.
# ---------------------------------------------------------------------------


def test_ssm_default_config():
    assert DEFAULT_SSM_CONFIG.connect_timeout == 2
    assert DEFAULT_SSM_CONFIG.read_timeout == 5
    assert DEFAULT_SSM_CONFIG.retries == {"max_attempts": 3, "mode": "standard"}


def test_building_a_store_leaves_the_default_config_as_it_was():
    """botocore normalises a config's ``max_attempts`` to ``total_max_attempts`` (first try included) in place
    when it builds a client: the store gives it a copy, so the default reads the same before and after."""
    store = SsmStore(region_name=REGION, endpoint_url="http://127.0.0.1:9", credentials=("testing", "testing"))
    assert store.client.meta.config.retries == {"total_max_attempts": 4, "mode": "standard"}
    assert DEFAULT_SSM_CONFIG.retries == {"max_attempts": 3, "mode": "standard"}


def test_ssm_store_builds_its_client(moto_endpoint, fresh_ssm):
    store = SsmStore(region_name=REGION, endpoint_url=moto_endpoint, credentials=("testing", "testing"))
    assert store.client.meta.config.connect_timeout == 2
    assert store.client.meta.config.retries["total_max_attempts"] == 4
    name = put_for_ref(store, PREFIX, PROJECT, KEY, STAGED, "raw")
    assert store.read_staged(name) == "raw"
    store2 = SsmStore(region_name=REGION, endpoint_url=moto_endpoint,
                      credentials={"aws_access_key_id": "testing", "aws_secret_access_key": "testing"})
    assert store2.read_staged(name) == "raw"
    with pytest.raises(ValueError):
        SsmStore(client=fresh_ssm, region_name=REGION)


def test_ssm_values_are_secure_strings(fresh_ssm):
    store = SsmStore(client=fresh_ssm)
    name = put_for_ref(store, PREFIX, PROJECT, KEY, LEGACY, "raw")
    param = fresh_ssm.get_parameter(Name=name)["Parameter"]
    assert param["Type"] == "SecureString"
    assert param["Version"] == 3
    assert store.read_legacy(name, 1) == ("envreplica-fixture-filler", 1)


def test_ssm_put_for_ref_refuses_what_ssm_cannot_do(fresh_ssm):
    store = SsmStore(client=fresh_ssm)
    with pytest.raises(ValueError):
        put_for_ref(store, PREFIX, PROJECT, KEY, LEGACY, "raw", reported_version=4)
    put_for_ref(store, PREFIX, PROJECT, KEY, LEGACY, "raw")
    with pytest.raises(ValueError):  # version 2 is history now
        put_for_ref(store, PREFIX, PROJECT, KEY, LegacyRef(2), "raw")
    put_for_ref(store, PREFIX, PROJECT, KEY, LegacyRef(5), "later")
    name = legacy_parameter_name(PREFIX, PROJECT, KEY)
    assert store.read_legacy(name, 3) == ("raw", 3)
    assert store.read_legacy(name, 5) == ("later", 5)


def test_ssm_closed_port_fails_fast():
    store = _closed_port_store()
    sent = []  # each HTTP attempt the client makes: fast means one attempt per read, no retry storm
    store.client.meta.events.register("before-send.ssm", lambda request, **_: sent.append(request.url))
    with pytest.raises(ValueStoreError) as exc:
        store.read_staged("/p/projects/x/env-values/abc/def")
    with pytest.raises(ValueStoreError):
        store.read_legacy("/p/projects/x/env/K", 1)
    assert len(sent) == 2
    assert "read_staged" in str(exc.value) and "EndpointConnectionError" in str(exc.value)


def test_ssm_other_client_errors_raise_without_value():
    client = boto3.client("ssm", region_name=REGION, aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    store = SsmStore(client=client)
    with Stubber(client) as stub:
        stub.add_client_error("get_parameter", service_error_code="ThrottlingException",
                              service_message="Rate exceeded", http_status_code=400)
        stub.add_client_error("get_parameter", service_error_code="ParameterVersionNotFound",
                              http_status_code=400)
        stub.add_client_error("get_parameter", service_error_code="ParameterNotFound",
                              http_status_code=400)
        stub.add_client_error("get_parameter", service_error_code="InvalidKeyId",
                              http_status_code=400)
        with pytest.raises(ValueStoreError) as exc:
            store.read_staged("/p/x")
        assert str(exc.value) == "ssm read_staged: GetParameter failed with ThrottlingException"
        # A version error is "not found" only for a legacy read.
        with pytest.raises(ValueStoreError):
            store.read_staged("/p/x")
        assert store.read_legacy("/p/x", 1) is None
        with pytest.raises(ValueStoreError) as exc:
            store.read_legacy("/p/x", 1)
        assert str(exc.value) == "ssm read_legacy: GetParameter failed with InvalidKeyId"
        stub.assert_no_pending_responses()


def test_ssm_malformed_response_raises():
    client = boto3.client("ssm", region_name=REGION, aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    store = SsmStore(client=client)
    with Stubber(client) as stub:
        stub.add_response("get_parameter", {"Parameter": {"Name": "/p/x", "Type": "SecureString"}},
                          {"Name": "/p/x:1", "WithDecryption": True})
        with pytest.raises(ValueStoreError):
            store.read_legacy("/p/x", 1)
