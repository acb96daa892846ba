"""The web view in a real browser (Debian's chromium, headless, over the DevTools protocol)
against all of gpupool on the dev cluster, with two tenants:

- as the operator (the dev cluster's `--dev-insecure`: no token), each pod's slice is drawn on
  the card its GpuLease names, a tenant's quota bar shows its GpuQuota status, the pod over quota
  shows at its queue position, and a pod placed after the page loaded appears without a reload,
  by a patch of the document the page holds (which then equals GET /api/v1/state);
- logged in with tenant A's ServiceAccount token (the login form), A's pods show and B's do not
  (B's slices are drawn as someone else's, nameless); B's tenant page is refused with a message,
  and the HTTP API refuses B's tenant and namespace with 403, a bad token with 401.

Screenshots go to build/e2e-artifacts/web/ (or $GPUPOOL_E2E_ARTIFACTS/web/)."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from support.cdp import Chromium, Page, chromium_binary
from support.waiting import wait_until

from gpupool.devcluster import rbac
from gpupool.devcluster.errors import ApiError

if TYPE_CHECKING:
    from conftest import E2ECluster

pytestmark = pytest.mark.e2e

API = "/apis/gpupool.io/v1alpha1"
REPO = Path(__file__).resolve().parents[2]
GiB = 1024**3


def _artifacts() -> Path:
    root = Path(os.environ.get("GPUPOOL_E2E_ARTIFACTS", REPO / "build" / "e2e-artifacts"))
    return root / "web"


def _pod(name: str, memory: str = "12Gi") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/infer:1",
                    "resources": {"limits": {"gpupool.io/gpu-memory": memory}},
                }
            ]
        },
    }


def _tenant(c: E2ECluster, name: str, nominal: str) -> str:
    """A tenant with its namespace (of the same name), its quota, the tenant RBAC for its
    developers' group and for a ServiceAccount `viewer` there; returns that account's token."""
    admin = c.api
    admin.create(
        f"{API}/gpuquotas",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GpuQuota",
            "metadata": {"name": name},
            "spec": {"nominal": nominal},
        },
    )
    admin.create(
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {"gpupool.io/tenant": name}},
        },
    )
    objects = rbac.tenant_rbac(name, name)
    viewer = {"kind": "ServiceAccount", "name": "viewer", "namespace": name}
    for obj in objects:
        if obj["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            obj["subjects"] = [*obj["subjects"], viewer]
    rbac.apply(admin, objects)
    admin.create(
        f"/api/v1/namespaces/{name}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "viewer"}},
    )
    review = admin.create(
        f"/api/v1/namespaces/{name}/serviceaccounts/viewer/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    return str(review["status"]["token"])


def _lease_of(c: E2ECluster, ns: str, pod: str) -> dict[str, Any] | None:
    got = c.api.get(f"/api/v1/namespaces/{ns}/pods/{pod}")
    ref = (got["metadata"].get("annotations") or {}).get("gpupool.io/lease")
    if not ref:
        return None
    try:  # the extender names the lease on the pod before it creates it (after the Binding)
        lease: dict[str, Any] = c.api.get(f"{API}/namespaces/{ns}/gpuleases/{ref.split('/')[1]}")
    except ApiError as err:
        if err.status == 404:
            return None
        raise
    return lease


def _http(url: str, token: str | None) -> tuple[int, Any]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=30) as resp:
            return int(resp.status), json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _slice_on_card(pod: str, lease: dict[str, Any]) -> str:
    """JS: whether `pod`'s slice is drawn inside the card its lease names."""
    node = lease["spec"]["node"]
    card = lease["spec"]["devices"][0]["index"]
    return (
        f'!!document.querySelector(\'.card[data-node="{node}"][data-card="{card}"] '
        f'.slice[data-pod="{pod}"]\')'
    )


# How many whole states, patches and fetches of the whole state again the page has had.
_COUNTS = (
    "({states: Number(document.body.dataset.states || 0), "
    "patches: Number(document.body.dataset.patches || 0), "
    "resyncs: Number(document.body.dataset.resyncs || 0)})"
)


async def _text(page: Page, selector: str) -> str:
    return str(
        await page.evaluate(f"document.querySelector({json.dumps(selector)})?.textContent ?? ''")
    )


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Any:
    binary = chromium_binary()
    if binary is None:
        why = subprocess.run(
            [str(REPO / "tools" / "chromium" / "install.sh")], capture_output=True, text=True
        )
        binary = chromium_binary()
        if binary is None:
            pytest.skip(f"no chromium: {why.stderr.strip() or 'tools/chromium/install.sh failed'}")
    root = tmp_path_factory.mktemp("chromium")
    browser = Chromium.start(binary, root / "profile", root / "chromium.log")
    yield browser
    browser.stop()


def test_the_web_view_draws_the_pool_live_and_shows_a_tenant_only_its_own(
    gpupool_cluster: E2ECluster, chromium: Chromium
) -> None:
    c = gpupool_cluster
    url = c.state.web_url
    assert url, "the dev cluster started no web view"
    tag = secrets.token_hex(3)
    a, b = f"web-a-{tag}", f"web-b-{tag}"
    token_a = _tenant(c, a, "24Gi")
    _tenant(c, b, "48Gi")
    for ns, name in ((a, "infer-1"), (a, "infer-2"), (b, "infer-1")):
        c.api.create(f"/api/v1/namespaces/{ns}/pods", _pod(name))
    placed = {
        (ns, name): wait_until(
            lambda ns=ns, name=name: _lease_of(c, ns, name), 90, f"a GpuLease for {ns}/{name}"
        )
        for ns, name in ((a, "infer-1"), (a, "infer-2"), (b, "infer-1"))
    }
    c.api.create(f"/api/v1/namespaces/{a}/pods", _pod("over-quota"))  # 24Gi of 24Gi held

    def recorded() -> Any:
        quota = c.api.get(f"{API}/gpuquotas/{a}")
        status = quota.get("status") or {}
        return status if status.get("queue") and status.get("usedAmount") == 24 * GiB else None

    quota_status = wait_until(recorded, 60, f"the controller to record {a}'s queue and use")
    out = _artifacts()

    async def drive() -> None:
        async with chromium.page() as page:
            # ---- the operator (no token on the dev cluster) -----------------------------------
            await page.navigate(url)
            for (ns, name), lease in placed.items():
                await page.wait_for(
                    _slice_on_card(f"{ns}/{name}", lease),
                    f"{ns}/{name} drawn on the card its lease names",
                )
            used = await page.evaluate(
                f"document.querySelector('.quota[data-tenant=\"{a}\"]')?.dataset.used"
            )
            assert used == str(quota_status["usedAmount"])
            bar = await _text(page, f'.quota[data-tenant="{a}"] .quota-text')
            assert "used 24Gi of nominal 24Gi" in bar, bar
            queued = f'tr.queued[data-pod="{a}/over-quota"]'
            position = await page.wait_for(
                f"document.querySelector('{queued}')?.dataset.position",
                f"{a}/over-quota in the queue",
            )
            assert position == "1"
            await page.screenshot(out / "operator-pool.png")

            # A pod placed after the page loaded appears without a reload: a mark set on the
            # page's window survives (a reload would clear it). It comes as a patch: no whole
            # state arrives meanwhile, and the page does not fetch one again.
            await page.evaluate("window.__sameLoad = 'yes'")
            await page.wait_for(_COUNTS + ".states >= 1", "the stream's first, whole, state")
            before = await page.evaluate(_COUNTS)
            c.api.create(f"/api/v1/namespaces/{b}/pods", _pod("infer-late", "20Gi"))
            late = wait_until(lambda: _lease_of(c, b, "infer-late"), 90, "the late pod's lease")
            await page.wait_for(
                _slice_on_card(f"{b}/infer-late", late), "the late pod drawn without a reload"
            )
            assert await page.evaluate("window.__sameLoad") == "yes"
            assert await page.evaluate("document.getElementById('live').dataset.state") == "live"
            after = await page.evaluate(_COUNTS)
            assert after["patches"] > before["patches"], (before, after)
            assert (after["states"], after["resyncs"]) == (before["states"], 0), (before, after)
            # the document the patches built is the one the server answers (once both are at
            # one snapshot: the wait retries while the pool moves)
            await page.wait_for(
                "fetch('/api/v1/state').then((r) => r.json())"
                ".then((d) => JSON.stringify(d) === JSON.stringify(held.doc))",
                "the patched document to equal GET /api/v1/state",
            )

            # The node page of a's first pod lists its slice.
            node = placed[(a, "infer-1")]["spec"]["node"]
            await page.navigate(f"{url}#/node/{node}")
            # one slice list per card: the pod's may be on any card of the node (the e2e cluster
            # is shared with the other tests' pods)
            await page.wait_for(
                "[...document.querySelectorAll('#view[data-page=\"node\"] .slice-list')]"
                f".some((list) => list.textContent.includes('{a}/infer-1'))",
                "the node page's slice list",
            )
            await page.screenshot(out / "operator-node.png")

            # ---- tenant a, logged in with its token through the form --------------------------
            await page.navigate(url)
            await page.wait_for(
                "document.getElementById('login-open')?.hidden === false", "log-in button"
            )
            await page.evaluate(
                "document.getElementById('login-open').click();"
                f"document.getElementById('token').value = {json.dumps(token_a)};"
                "document.getElementById('login').requestSubmit()"
            )
            await page.wait_for(
                f"document.getElementById('who').dataset.user === "
                f"'system:serviceaccount:{a}:viewer'",
                "the page to show tenant a's identity",
            )
            await page.wait_for(
                _slice_on_card(f"{a}/infer-1", placed[(a, "infer-1")]), "a's own slice"
            )
            seen = await page.evaluate(
                "[...document.querySelectorAll('[data-pod]')].map(e => e.dataset.pod)"
            )
            assert not [p for p in seen if p.startswith(f"{b}/")], seen
            assert f"{a}/over-quota" in seen
            assert await page.evaluate(f"!document.querySelector('[data-tenant=\"{b}\"]')")
            await page.screenshot(out / "tenant-pool.png")
            await page.navigate(f"{url}#/tenant/{a}")
            await page.wait_for(
                '!!document.querySelector(\'#view[data-page="tenant"] '
                f'.quota[data-tenant="{a}"]\')',
                "a's tenant page",
            )
            await page.screenshot(out / "tenant-page.png")
            await page.navigate(f"{url}#/tenant/{b}")
            message = await page.wait_for(
                "!document.getElementById('message').hidden && "
                "document.getElementById('message').textContent",
                "the refusal of b's tenant page",
            )
            assert "403" in message and f"may not read tenant '{b}'" in message, message

    asyncio.run(drive())

    # ---- the HTTP API, with the same tokens ---------------------------------------------------
    api = f"{url}api/v1"
    code, doc = _http(f"{api}/state", token_a)
    assert code == 200 and doc["user"] == f"system:serviceaccount:{a}:viewer"
    pods = {s["pod"] for n in doc["status"]["nodes"] for card in n["cards"] for s in card["slices"]}
    assert f"{a}/infer-1" in pods and not [p for p in pods if p.startswith(f"{b}/")]
    assert {t["name"] for t in doc["status"]["tenants"]} == {a}
    code, doc = _http(f"{api}/status?tenant={b}", token_a)
    assert code == 403 and f"may not read tenant '{b}'" in doc["message"], doc
    code, doc = _http(f"{api}/leases?namespace={b}", token_a)
    assert code == 403 and f"may not read namespace '{b}'" in doc["message"], doc
    code, doc = _http(f"{api}/state", "not-a-token")
    assert code == 401 and "log in again" in doc["message"], doc
    code, doc = _http(f"{api}/status?node=no-such-node", None)
    assert code == 404 and "no GPU node named 'no-such-node'" in doc["message"], doc
    code, doc = _http(f"{api}/status?tenant=no-such-tenant", None)
    assert code == 404 and "no tenant named 'no-such-tenant'" in doc["message"], doc
