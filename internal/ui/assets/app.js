// Nodewright UI. Plain JavaScript, no build step. State arrives as server-sent events from
// the watches the local server runs with the user's credentials; the page never polls.
'use strict';

// The token. `kubectl nodewright ui` prints (and opens) the page's URL with the token in its
// fragment, #token=…, which browsers never send to a server. The page keeps it in this tab's
// sessionStorage (per origin, so per port; gone with the tab), takes it out of the address bar,
// and sends it in a header on every call. No cookie: browsers would send it to every other web
// server on 127.0.0.1.
const tokenKey = 'nodewright-token';
const token = (() => {
  const fragment = new URLSearchParams(location.hash.slice(1));
  const given = fragment.get('token');
  if (given) {
    sessionStorage.setItem(tokenKey, given);
    history.replaceState(null, '', location.pathname + location.search);
  }
  return sessionStorage.getItem(tokenKey) || '';
})();
// The namespace the page is scoped to (-n), or '' for every namespace; the hello event says.
let fixedNamespace = '';
let helloSeen = false;

const store = {
  objects: {},   // kind -> key -> object
  problems: {},  // kind -> message
  synced: {},    // kind -> true once listed
  timeline: [],  // transitions the server observed
  user: '',
  trailGiven: false,
  ready: false,
};
let trail = null;          // the last /api/trail answer
let confirming = null;     // the key of the migration whose cancel is being confirmed
const announced = {};      // key -> phase last announced

// The legacy states and the phase each rolls up to (docs: design §3).
const statePhase = {
  INIT: 'Bootstrap', NETWORK_CONFIGURING: 'Bootstrap', STORAGE_BOOTSTRAPPING: 'Bootstrap',
  SINGLE_NODE_READY: 'SingleNode', PEER_DETECTED: 'Upgrading', PEER_NETWORK_CONFIGURING: 'Upgrading',
  PEER_STORAGE_JOINING: 'Upgrading', REPLICA_PLACEMENT: 'Upgrading', DRBD_CONNECTING: 'Upgrading',
  DRBD_SYNCING: 'Upgrading', DRBD_VERIFYING: 'Upgrading', QUORUM_CONFIGURING: 'Upgrading',
  TAINTS_RELEASING: 'Upgrading', MULTI_NODE_READY: 'MultiNode', PEER_LOST: 'Degraded',
  DRBD_DEGRADED: 'Degraded', SPLIT_BRAIN: 'Degraded', FAILED: 'Degraded', BOOT_RECOVERY: 'Recovering',
  RECOVERING: 'Recovering', RESYNCING: 'Recovering',
};

// Every phase and state has a word, an icon and a tone; colour is never the only signal.
const looks = {
  Bootstrap: ['◐', 'info'], SingleNode: ['●', 'ok'], Upgrading: ['⇧', 'info'], MultiNode: ['✔', 'ok'],
  Degraded: ['▲', 'bad'], Recovering: ['↻', 'info'], Unknown: ['?', 'warn'],
  Pending: ['○', 'neutral'], Waiting: ['‖', 'warn'], Running: ['↻', 'info'], Succeeded: ['✔', 'ok'], Failed: ['✖', 'bad'],
  RollingBack: ['↶', 'warn'], RolledBack: ['↩', 'warn'], Skipped: ['–', 'neutral'], Cancelled: ['■', 'warn'],
  True: ['✔', 'ok'], False: ['✖', 'bad'], Refused: ['⊘', 'bad'], InProgress: ['↻', 'info'],
};

// ---- DOM helpers ---------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function badge(word, opts = {}) {
  const [icon, tone] = looks[word] || ['•', 'neutral'];
  return h('span', { class: `badge tone-${opts.tone || tone}`, id: opts.id, 'data-phase': word },
    h('span', { class: 'icon', 'aria-hidden': 'true' }, icon), ' ', opts.label || word);
}

function replace(el, ...children) {
  el.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

function fmtTime(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  const sameDay = d.toDateString() === new Date().toDateString();
  const time = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
  return sameDay ? time : `${d.toLocaleDateString()} ${time}`;
}

function timeEl(iso) {
  return h('time', { datetime: iso, title: iso }, fmtTime(iso));
}

function ago(iso) {
  if (!iso) return '';
  const s = Math.max(0, Math.round((Date.now() - new Date(iso).getTime()) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

// An age that the page's clock keeps current (see tick).
function agoEl(iso) {
  return h('span', { class: 'ago', 'data-since': iso }, ago(iso));
}

function bytes(n) {
  if (n === undefined || n === null) return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

function condition(obj, type) {
  return ((obj && obj.status && obj.status.conditions) || []).find((c) => c.type === type);
}

function objects(kind) {
  return Object.values(store.objects[kind] || {});
}

function announce(text) {
  const el = document.getElementById('announce');
  el.textContent = text;
}

function problemsFor(kinds) {
  const msgs = kinds.filter((k) => store.problems[k]).map((k) => store.problems[k]);
  return msgs.map((m) => h('p', { class: 'notice tone-bad', role: 'alert' }, h('span', { 'aria-hidden': 'true' }, '✖ '), m));
}

function conditionsTable(obj, caption) {
  const conds = (obj.status && obj.status.conditions) || [];
  if (!conds.length) return null;
  return h('table', { class: 'conditions' },
    h('caption', { class: 'visually-hidden' }, caption),
    h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Condition'), h('th', { scope: 'col' }, 'Status'), h('th', { scope: 'col' }, 'Why'))),
    h('tbody', {}, conds.map((c) => h('tr', {},
      h('th', { scope: 'row' }, c.type),
      h('td', {}, badge(c.status)),
      h('td', {}, h('span', { class: 'reason' }, c.reason), c.message ? [' — ', c.message] : '')))));
}

// ---- Cluster page --------------------------------------------------------------------

function renderCluster() {
  replace(document.getElementById('cluster-problems'),
    problemsFor(['NodewrightCluster', 'NodewrightAgentStatus', 'EdgeProfile', 'LegacyConfigMap', 'LegacyEvent']));
  const nwc = (store.objects.NodewrightCluster || {}).nodewright;
  const health = document.getElementById('cluster-health');
  if (!nwc) {
    replace(health, h('p', {}, store.synced.NodewrightCluster
      ? 'There is no NodewrightCluster named “nodewright” (or you may not read it): Nodewright observes nothing yet.'
      : 'Loading…'));
  } else {
    const st = nwc.status || {};
    const phase = st.phase || 'Unknown';
    const nodes = st.nodes || {};
    if (announced.cluster && announced.cluster !== phase) announce(`Cluster phase is now ${phase}`);
    announced.cluster = phase;
    replace(health,
      h('div', { class: 'phase-line' }, h('span', { class: 'label' }, 'Phase'), badge(phase, { id: 'cluster-phase', label: st.phase ? phase : 'Unknown (not observed yet)' })),
      h('dl', { class: 'facts' },
        h('dt', {}, 'Legacy state'), h('dd', { id: 'legacy-state' }, st.legacyState || '—',
          st.legacyStateSince ? [' since ', timeEl(st.legacyStateSince), ' (', agoEl(st.legacyStateSince), ')'] : ''),
        h('dt', {}, 'Legacy generation'), h('dd', {}, st.legacyGeneration ?? '—'),
        h('dt', {}, 'Nodes ready'), h('dd', {}, `${nodes.ready || 0} of ${nodes.total || 0}`),
        h('dt', {}, 'Legacy ConfigMap'), h('dd', {}, nwc.spec && nwc.spec.legacy ? `${nwc.spec.legacy.configMapRef.namespace}/${nwc.spec.legacy.configMapRef.name}` : '—'),
        h('dt', {}, 'Stale after'), h('dd', {}, (nwc.spec && nwc.spec.heartbeatStaleAfter) || '30s')),
      details('cluster-conditions', 'Conditions', conditionsTable(nwc, 'Conditions of the cluster')));
  }
  renderNodes(nwc);
  renderTimeline(nwc);
  renderWarnings(nwc);
  renderProfile(nwc);
}

function legacyHeartbeat(node) {
  const cm = objects('LegacyConfigMap')[0];
  return cm && cm.data ? cm.data[`node.${node}.heartbeat`] : undefined;
}

function storageHealth(a) {
  const s = a.status && a.status.storage;
  const cond = condition(a, 'StorageHealthy');
  let word = 'Not reported';
  let look = 'Unknown';
  if (cond) {
    word = cond.status === 'True' ? 'Healthy' : cond.status === 'False' ? 'Degraded' : 'Unknown';
    look = cond.status;
  } else if (s) {
    const healthy = s.upToDate === s.resources && s.outOfSyncKiB === 0;
    word = healthy ? 'Healthy' : 'Degraded';
    look = healthy ? 'True' : 'False';
  }
  return { s, cond, word, look };
}

// bootOf says how a Kairos node booted: its slot, and whether this boot is a fallback. A
// Passive slot reads differently after a fallback (the node's last fallback is this boot, or
// the upgrade_failure sentinel is set) than when the node was booted there on purpose.
function bootOf(st) {
  const os = st.os || {};
  const k = os.kairos;
  if (!k) return null;
  const fb = k.lastFallback;
  const fellBackNow = !!(fb && fb.bootID && fb.bootID === os.bootID) || !!k.upgradeFailure;
  const slot = k.bootEntry || '';
  let tone = 'neutral';
  let label = slot || 'not said';
  let hint = '';
  if (slot === 'Active') tone = 'ok';
  else if (slot === 'Passive' && fellBackNow) { tone = 'bad'; label = 'Passive, fell back'; hint = 'this boot fell back from the image it was upgraded to'; }
  else if (slot === 'Passive') { tone = 'info'; hint = 'booted there on purpose: no fallback this boot'; }
  else if (slot === 'Recovery') { tone = 'bad'; hint = 'the recovery system'; }
  else if (slot) tone = 'warn';
  return { k, fb, fellBackNow, slot, tone, label, hint };
}

function fallbackText(fb) {
  return [`from ${fb.fromImage}`, fb.toImage ? ` to ${fb.toImage}` : '', fb.bootID ? ` at boot ${fb.bootID}` : '',
    fb.seenAt ? [', seen ', timeEl(fb.seenAt), ' (', agoEl(fb.seenAt), ')'] : ''];
}

function bootFacts(st) {
  const b = bootOf(st);
  if (!b) return [];
  return [
    h('dt', {}, 'Boot slot'), h('dd', { class: 'boot', 'data-slot': b.slot, 'data-fell-back': String(b.fellBackNow) },
      badge(b.slot || 'Unknown', { tone: b.tone, label: b.label }),
      b.k.image ? h('span', { class: 'image block' }, b.k.image) : '',
      b.hint ? h('span', { class: 'hint block' }, b.hint) : ''),
    h('dt', {}, 'Last fallback'), h('dd', { class: 'fallback', 'data-this-boot': String(!!(b.fb && b.fellBackNow)) },
      b.fb ? [b.fellBackNow ? h('strong', {}, 'This boot: ') : '', fallbackText(b.fb)] : h('span', { class: 'hint' }, 'none')),
  ];
}

function renderNodes(nwc) {
  const el = document.getElementById('nodes');
  const agents = objects('NodewrightAgentStatus').sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
  if (!agents.length) {
    replace(el, h('p', {}, store.synced.NodewrightAgentStatus ? 'No node reports yet (NodewrightAgentStatus).' : 'Loading…'));
    return;
  }
  const staleAfter = nwc && nwc.spec && nwc.spec.heartbeatStaleAfter;
  replace(el, agents.map((a) => {
    const st = a.status || {};
    const name = a.metadata.name;
    const hb = st.heartbeat || {};
    const live = legacyHeartbeat(name);
    const fresh = !hb.stale;
    const { s, cond, word, look } = storageHealth(a);
    return h('article', { class: `card node ${fresh ? '' : 'is-stale'}`, 'data-node': name, 'aria-labelledby': `node-${name}` },
      h('h3', { id: `node-${name}` }, name),
      h('dl', { class: 'facts' },
        h('dt', {}, 'Role'), h('dd', { class: 'role' }, st.role || '—'),
        h('dt', {}, 'Heartbeat'), h('dd', { class: 'heartbeat' },
          badge(fresh ? 'True' : 'False', { label: fresh ? 'Fresh' : 'Stale' }), ' ',
          live ? ['last ', agoEl(live)] : hb.lastSeen ? ['recorded ', agoEl(hb.lastSeen)] : '',
          !fresh && staleAfter ? h('span', { class: 'hint' }, ` (older than ${staleAfter})`) : ''),
        h('dt', {}, 'Storage'), h('dd', { class: 'storage' }, badge(look, { label: word }),
          s ? h('span', { class: 'drbd' }, `${s.connected} of ${s.resources} connected · ${s.upToDate} of ${s.resources} up to date · ${s.outOfSyncKiB ? bytes(s.outOfSyncKiB * 1024) : '0 KiB'} out of sync`)
            : cond && cond.message ? h('span', { class: 'hint block' }, cond.message) : ''),
        h('dt', {}, 'Bond mode'), h('dd', { class: 'bond' }, (st.network && st.network.bondMode) || '—'),
        bootFacts(st)));
  }));
}

// timelineRows merges the transitions this UI saw, the legacy DaemonSet's Events and the
// audit trail's records, one row per legacy generation.
function timelineRows() {
  const rows = new Map();
  const add = (key, fields, evidence) => {
    const row = rows.get(key) || { evidence: new Set() };
    for (const [k, v] of Object.entries(fields)) if (v !== undefined && v !== null && v !== '' && row[k] === undefined) row[k] = v;
    row.evidence.add(evidence);
    rows.set(key, row);
  };
  for (const t of store.timeline) {
    add(`g${t.generation}`, { generation: t.generation, from: t.from, to: t.to, time: t.since || t.observed, missed: t.missed },
      t.source === 'live' ? 'seen live' : 'in the status');
  }
  for (const ev of objects('LegacyEvent')) {
    const m = /(\S+)\s*->\s*(\S+)/.exec(ev.message || '');
    const g = /generation (\d+)/.exec(ev.message || '');
    if (!m) continue;
    const gen = g ? Number(g[1]) : undefined;
    add(gen !== undefined ? `g${gen}` : `e${ev.time}${ev.message}`, { generation: gen, from: m[1] === '(none)' ? '' : m[1], to: m[2], time: ev.time }, 'Event');
  }
  for (const r of (trail && trail.records) || []) {
    if (r.action !== 'LegacyTransitionObserved') continue;
    const d = (r.details || []).find((x) => x.name === 'legacyGeneration');
    const gen = d ? Number(d.value) : undefined;
    add(gen !== undefined ? `g${gen}` : `a${r.id}`, { generation: gen, from: r.from, to: r.to, time: r.time }, 'audit trail');
  }
  return [...rows.values()].sort((a, b) => (b.generation ?? 0) - (a.generation ?? 0) || new Date(b.time) - new Date(a.time));
}

function renderTimeline(nwc) {
  const rows = timelineRows();
  const hint = [];
  hint.push('Each transition of the legacy DaemonSet, newest first, with where it was seen: live on this page, in the cluster’s status, in its Events, in the audit trail.');
  if (!store.trailGiven) hint.push(' No audit trail folder was given, so older transitions come from Events only (kept about an hour).');
  replace(document.getElementById('timeline-hint'), hint.join(''));
  const ol = document.getElementById('timeline');
  if (!rows.length) {
    replace(ol, h('li', { class: 'empty' }, nwc ? 'No transition seen yet.' : '—'));
    return;
  }
  const shown = rows.slice(0, 30);
  replace(ol, shown.map((r) => {
    const phase = statePhase[r.to] || 'Unknown';
    return h('li', { 'data-generation': r.generation ?? '' },
      h('span', { class: 'when' }, r.time ? timeEl(r.time) : ''),
      h('span', { class: 'what' }, r.from ? [h('span', { class: 'state' }, r.from), h('span', { class: 'arrow', 'aria-label': 'to' }, ' → ')] : '',
        h('span', { class: 'state' }, r.to), ' ', badge(phase)),
      h('span', { class: 'evidence' },
        r.generation !== undefined ? `generation ${r.generation}` : '',
        ` · ${[...r.evidence].join(', ')}`,
        r.missed ? h('span', { class: 'warn-text' }, ` · ${r.missed} transition(s) before it not seen`) : ''));
  }), rows.length > shown.length ? h('li', { class: 'empty' }, `${rows.length - shown.length} older transition(s) not shown${store.trailGiven ? ': see the audit trail' : ''}.`) : null);
}

function renderWarnings(nwc) {
  const ol = document.getElementById('warnings');
  const ws = ((nwc && nwc.status && nwc.status.recentWarnings) || []).slice().reverse();
  if (!ws.length) {
    replace(ol, h('li', { class: 'empty' }, 'None.'));
    return;
  }
  replace(ol, ws.map((w) => h('li', {},
    h('span', { class: 'when' }, timeEl(w.time)), ' ',
    badge('Degraded', { label: w.reason, tone: 'warn' }), ' ',
    h('span', { class: 'hint' }, `(${w.source})`), h('span', { class: 'block' }, w.message))));
}

function renderProfile(nwc) {
  const el = document.getElementById('profile');
  if (!nwc) { replace(el, h('p', {}, '—')); return; }
  const ref = nwc.spec && nwc.spec.profileRef;
  const active = nwc.status && nwc.status.profile;
  const applied = condition(nwc, 'ProfileApplied');
  if (!ref && !active) {
    replace(el, h('p', {}, 'No EdgeProfile: spec.profileRef is not set, so the cluster’s own legacy names and threshold apply.'));
    return;
  }
  const p = (store.objects.EdgeProfile || {})[(active && active.name) || ref.name];
  const verified = p && condition(p, 'SignatureVerified');
  const spec = (p && p.spec) || {};
  replace(el,
    applied ? h('p', {}, badge(applied.status, { label: applied.status === 'True' ? 'Applied' : 'Not applied' }), ' ', applied.message || '') : null,
    h('dl', { class: 'facts' },
      h('dt', {}, 'Name'), h('dd', {}, (active && active.name) || ref.name),
      h('dt', {}, 'Version'), h('dd', {}, (active && active.version) || spec.version || '—'),
      active ? [h('dt', {}, 'Digest'), h('dd', { class: 'mono', title: active.digest }, short(active.digest, 23))] : null,
      active && active.keyID ? [h('dt', {}, 'Signed by key'), h('dd', { class: 'mono' }, active.keyID)] : null,
      spec.topology ? [h('dt', {}, 'Topology'), h('dd', {}, spec.topology)] : null,
      spec.storage ? [h('dt', {}, 'Storage'), h('dd', {}, spec.storage.backend, spec.storage.storageClassName ? ` (${spec.storage.storageClassName})` : '')] : null,
      spec.os ? [h('dt', {}, 'OS'), h('dd', {}, spec.os)] : null,
      spec.network ? [h('dt', {}, 'Bond'), h('dd', {}, `${spec.network.bondInterface || ''} ${spec.network.bondMode || ''}`)] : null,
      verified ? [h('dt', {}, 'Signature'), h('dd', {}, badge(verified.status, { label: verified.status === 'True' ? 'Verified' : 'Not verified' }))] : null));
}

// Disclosures keep their open state across re-renders, and their summary, the part that
// takes the keyboard focus, carries the key by which render puts the focus back.
const openDetails = new Set();
function details(key, summary, ...content) {
  const el = h('details', { open: openDetails.has(key) }, h('summary', { 'data-key': key }, summary), content);
  el.addEventListener('toggle', () => { if (el.open) openDetails.add(key); else openDetails.delete(key); });
  return el;
}

// seconds words a step's duration; the API's times have whole seconds.
function seconds(ms) {
  return ms < 1000 ? '< 1 s' : `${Math.round(ms / 1000)} s`;
}

function short(s, n) {
  return s && s.length > n ? `${s.slice(0, n)}…` : s || '';
}

// ---- Workflows page ------------------------------------------------------------------

const finished = new Set(['Succeeded', 'RolledBack', 'Failed']);

function renderWorkflows() {
  replace(document.getElementById('workflow-problems'), problemsFor(['ReplicationUpgrade', 'BondModeFlipPlan', 'OSVersionPolicy', 'VMVolumeMigration']));
  renderUpgrades();
  renderFlips();
  renderOSPolicies();
  const el = document.getElementById('migrations');
  const ms = objects('VMVolumeMigration').sort((a, b) =>
    new Date(b.metadata.creationTimestamp) - new Date(a.metadata.creationTimestamp) || a.metadata.name.localeCompare(b.metadata.name));
  if (!ms.length) {
    replace(el, h('p', {}, store.synced.VMVolumeMigration
      ? `No VMVolumeMigration ${fixedNamespace ? `in namespace ${fixedNamespace}` : 'in any namespace you may list'}. Start one with the form.`
      : 'Loading…'));
    return;
  }
  replace(el, ms.map(migrationCard));
}

function migrationCard(m) {
  const key = `${m.metadata.namespace}/${m.metadata.name}`;
  const st = m.status || {};
  const phase = st.phase || 'Pending';
  const deleting = !!m.metadata.deletionTimestamp;
  if (announced[key] && announced[key] !== phase) announce(`Migration ${key} is now ${phase}`);
  announced[key] = phase;
  const id = `mig-${m.metadata.namespace}-${m.metadata.name}`;
  const spec = m.spec || {};
  const who = m.metadata.annotations && m.metadata.annotations['nodewright.spectrocloud.com/requested-by'];
  const succeeded = condition(m, 'Succeeded');
  const verified = condition(m, 'Verified');
  return h('article', { class: `card migration tone-edge-${(looks[phase] || [])[1] || 'neutral'}`, id, 'data-key': key, 'data-phase': phase, 'aria-labelledby': `${id}-title` },
    h('header', { class: 'card-head' },
      h('h3', { id: `${id}-title` }, fixedNamespace ? '' : h('span', { class: 'ns' }, `${m.metadata.namespace}/`), m.metadata.name),
      badge(phase, { id: `${id}-phase` }),
      deleting ? badge('RollingBack', { label: finished.has(phase) ? 'Deleting' : 'Cancelling' }) : null),
    h('p', { class: 'sub' }, 'VM ', h('strong', {}, spec.vmName), ', volume ', h('strong', {}, spec.volumeName),
      ' → StorageClass ', h('strong', {}, spec.target && spec.target.storageClassName), ` · ${spec.mode || 'Cold'}`,
      who ? [' · requested by ', h('strong', { class: 'requested-by' }, who)] : ''),
    progress(st.progress || (store.objects.CopyProgress || {})[key], id),
    steps(st),
    succeeded && succeeded.status === 'False' ? h('p', { class: 'notice tone-bad' }, h('span', { 'aria-hidden': 'true' }, '✖ '), `${succeeded.reason}: ${succeeded.message}`) : null,
    h('dl', { class: 'facts evidence-list' },
      st.checksum ? [h('dt', {}, 'Checksum'), h('dd', { class: 'checksum' },
        verified ? [badge(verified.status, { label: verified.status === 'True' ? 'Match' : 'Mismatch' }), ' '] : '',
        h('span', { class: 'mono block', title: st.checksum.source }, 'source ', short(st.checksum.source, 30)),
        h('span', { class: 'mono block', title: st.checksum.target }, 'target ', short(st.checksum.target, 30)))] : null,
      st.sourcePVCName || st.targetPVCName ? [h('dt', {}, 'PVCs'), h('dd', { class: 'mono pvcs' }, st.sourcePVCName || '—', ' → ', st.targetPVCName || '—')] : null,
      st.snapshots && (st.snapshots.before || st.snapshots.after) ? [h('dt', {}, 'Snapshots'), h('dd', { class: 'mono snapshots' },
        h('span', { class: 'block' }, 'before ', st.snapshots.before || '—'), h('span', { class: 'block' }, 'after ', st.snapshots.after || '—'))] : null,
      st.jobName ? [h('dt', {}, 'Job'), h('dd', { class: 'mono' }, st.jobName)] : null,
      st.startTime ? [h('dt', {}, 'Started'), h('dd', {}, timeEl(st.startTime))] : null,
      st.completionTime ? [h('dt', {}, 'Finished'), h('dd', {}, timeEl(st.completionTime))] : null),
    deleting ? null : actions(m, key, phase));
}

// progress is a migration's data progress: its status's, or while it copies (the status holds
// none then) what the server read from the copy's log with the user's credentials.
function progress(p, id) {
  if (!p) return null;
  return h('div', { class: 'progress' },
    h('label', { for: `${id}-progress` }, 'Data'),
    h('progress', { id: `${id}-progress`, max: 100, value: p.percent }, `${p.percent} %`),
    h('span', {}, `${p.percent} % · ${bytes(p.bytesDone)} of ${bytes(p.bytesTotal)}`));
}

function steps(st) {
  const list = st.steps || [];
  if (!list.length) return h('p', { class: 'hint' }, 'No step has started yet.');
  return h('ol', { class: 'steps' }, list.map((s) => h('li', { class: `step st-${s.state}`, 'data-step': s.name, 'data-state': s.state },
    h('span', { class: 'step-name' }, s.name), ' ', badge(s.state),
    s.startedAt && s.finishedAt ? h('span', { class: 'hint' }, ` ${seconds(new Date(s.finishedAt) - new Date(s.startedAt))}`) : '',
    s.message ? h('span', { class: 'step-msg block' }, s.message) : '')));
}

function actions(m, key, phase) {
  const done = finished.has(phase);
  const noun = done ? 'Delete' : 'Cancel';
  if (confirming === key) {
    return h('div', { class: 'confirm', role: 'group', 'aria-label': `${noun} ${key}?` },
      h('p', {}, done
        ? `Delete the record of ${key}? What it made (the target PVC, the snapshots) stays.`
        : `Cancel ${key}? It rolls back first: the VM is put back on its source volume.`),
      h('button', { type: 'button', class: 'danger', 'data-key': `${key}#yes`, onclick: () => cancel(m) }, done ? 'Yes, delete it' : 'Yes, cancel it'),
      ' ',
      h('button', { type: 'button', 'data-key': `${key}#no`, onclick: () => { confirming = null; render(); focusKey(`${key}#cancel`); } }, 'Keep it'));
  }
  return h('div', { class: 'actions' },
    h('button', { type: 'button', 'data-key': `${key}#cancel`, onclick: () => { confirming = key; render(); focusKey(`${key}#no`); } },
      done ? 'Delete record…' : 'Cancel migration…'));
}

async function cancel(m) {
  const key = `${m.metadata.namespace}/${m.metadata.name}`;
  confirming = null;
  const res = await api('DELETE', `/api/migrations/${encodeURIComponent(m.metadata.namespace)}/${encodeURIComponent(m.metadata.name)}?uid=${encodeURIComponent(m.metadata.uid)}`);
  if (res.ok) {
    announce(`Cancel of ${key} requested`);
  } else {
    const errs = (res.body.errors || []).map((e) => e.message).join('; ');
    announce(`Could not cancel ${key}: ${errs}`);
    window.alert(`Could not cancel ${key}: ${errs}`);
  }
  render();
}

// ---- Bond-mode flips -------------------------------------------------------------------

// The node states of a flip, each with an icon and a tone besides its word.
const nodeLooks = {
  Pending: ['○', 'neutral'], InProgress: ['↻', 'info'], Done: ['✔', 'ok'],
  RollingBack: ['↶', 'warn'], RolledBack: ['↩', 'warn'], Failed: ['✖', 'bad'],
};
// The cluster-wide workflow kinds whose steps a person approves: where the page approves,
// what the command says, and the word for one.
const gatedKinds = {
  flip: { api: 'flips', ref: 'bondflip', noun: 'flip' },
  upgrade: { api: 'upgrades', ref: 'rupg', noun: 'upgrade' },
  os: { api: 'ospolicies', ref: 'osvp', noun: 'OS version policy' },
};
const approveFeedback = {}; // workflow key -> { step, tone, text } of the last approval tried from this page

function renderFlips() {
  renderCards('flips', 'BondModeFlipPlan', flipCard,
    ['No BondModeFlipPlan. Start one with ', h('code', {}, 'kubectl nodewright flip --to MODE'), '.']);
}

// renderCards shows the objects of a cluster-scoped kind in the element elId, newest first,
// each as card makes it; empty says there are none.
function renderCards(elId, kind, card, empty) {
  const el = document.getElementById(elId);
  const list = objects(kind).sort((a, b) =>
    new Date(b.metadata.creationTimestamp) - new Date(a.metadata.creationTimestamp) || a.metadata.name.localeCompare(b.metadata.name));
  if (!list.length) {
    replace(el, h('p', { class: 'hint' }, store.synced[kind] ? empty : 'Loading…'));
    return;
  }
  replace(el, list.map(card));
}

// modesText is the node's bond mode as its agent last reported it, after the mode it had
// before the flip when that differs (as flip watch writes it).
function modesText(n) {
  if (!n.current && !n.previous) return '—';
  if (!n.previous || n.previous === n.current) return n.current;
  return `${n.previous} → ${n.current || '—'}`;
}

function stepItem(s) {
  return h('div', { class: `step st-${s.state}`, 'data-step': s.name, 'data-state': s.state },
    h('span', { class: 'step-name' }, s.name), ' ', badge(s.state),
    s.startedAt && s.finishedAt ? h('span', { class: 'hint' }, ` ${seconds(new Date(s.finishedAt) - new Date(s.startedAt))}`)
      : s.startedAt && s.state === 'Running' ? h('span', { class: 'hint' }, ' started ', agoEl(s.startedAt)) : '',
    s.message ? h('span', { class: 'step-msg block' }, s.message) : '');
}

function flipCard(f) {
  const name = f.metadata.name;
  const key = `flip/${name}`;
  const st = f.status || {};
  const p = f.progress || { nodes: [] };
  const phase = st.phase || 'Pending';
  if (announced[key] && announced[key] !== phase) announce(`Flip ${name} is now ${phase}`);
  announced[key] = phase;
  const id = `flip-${name}`;
  const spec = f.spec || {};
  const who = f.metadata.annotations && f.metadata.annotations['nodewright.spectrocloud.com/requested-by'];
  const succeeded = condition(f, 'Succeeded');
  const preflight = (st.steps || []).find((s) => s.name === 'Preflight');
  const nodeOf = (position) => p.nodes[position - 1];
  const failedOn = p.failed && p.failedPosition ? ` on node ${nodeOf(p.failedPosition).name} (${p.failedPosition} of ${p.nodes.length})` : '';
  return h('article', { class: `card migration flip tone-edge-${(looks[phase] || [])[1] || 'neutral'}`, id, 'data-key': key, 'data-phase': phase, 'aria-labelledby': `${id}-title` },
    h('header', { class: 'card-head' },
      h('h3', { id: `${id}-title` }, name),
      badge(phase, { id: `${id}-phase` })),
    h('p', { class: 'sub' }, 'Bond mode → ', h('strong', {}, spec.targetMode), ' on ', h('strong', {}, spec.bondInterface || 'the profile’s bond'),
      ` · VM protection ${spec.vmProtection || 'LiveMigrate'} · approval ${spec.approval || 'Automatic'}`,
      windowText(spec.maintenanceWindow),
      who ? [' · requested by ', h('strong', { class: 'requested-by' }, who)] : ''),
    preflight ? stepItem(preflight) : null,
    p.nodes.length ? h('ol', { class: 'flip-nodes', 'aria-label': `Nodes of ${name}, in the order they are changed` }, p.nodes.map((n) => {
      const [icon, tone] = nodeLooks[n.state] || ['•', 'neutral'];
      const current = p.current && p.currentPosition === n.position ? p.current : null;
      const failed = p.failed && p.failedPosition === n.position && (!current || current.name !== p.failed.name) ? p.failed : null;
      return h('li', { class: `flip-node ns-${n.state}`, 'data-node': n.name, 'data-position': n.position, 'data-state': n.state },
        h('span', { class: 'pos', 'aria-label': `position ${n.position}` }, n.position),
        h('span', { class: 'node-name' }, n.name),
        h('span', { class: 'modes mono' }, modesText(n)),
        h('span', { class: `badge tone-${tone}`, 'data-phase': n.state }, h('span', { class: 'icon', 'aria-hidden': 'true' }, icon), ' ', n.state),
        current ? stepItem(current) : null,
        failed ? stepItem(failed) : null);
    })) : h('p', { class: 'hint' }, 'The operator names the nodes when the flip starts.'),
    heldNotice(p),
    approval(gatedKinds.flip, f, key, p),
    resultNotice(phase, succeeded, failedOn),
    (st.steps || []).length ? details(`${key}#steps`, `All steps (${st.steps.length})`, steps(st)) : null);
}

// heldNotice says which gate holds the next step of a cluster-wide workflow, and why.
function heldNotice(p) {
  if (!p.held) return null;
  return h('p', { class: 'notice tone-warn held' }, h('span', { 'aria-hidden': 'true' }, '‖ '),
    h('strong', {}, `${p.current ? p.current.name : 'The next step'} waits: `), h('span', { class: 'reason' }, p.held.reason),
    p.held.message ? ` — ${p.held.message}` : '');
}

// resultNotice says how a finished workflow ended: the Succeeded condition's message, and for
// one that did not succeed its phase, where (failedOn) and the reason.
function resultNotice(phase, succeeded, failedOn) {
  if (!finished.has(phase) || !succeeded) return null;
  if (phase === 'Succeeded') {
    return h('p', { class: 'notice tone-ok result' }, h('span', { 'aria-hidden': 'true' }, '✔ '), succeeded.message);
  }
  return h('p', { class: 'notice tone-bad result' }, h('span', { 'aria-hidden': 'true' }, '✖ '),
    `${phase}${failedOn}: ${succeeded.reason}: ${succeeded.message}`);
}

// windowText is a maintenance window as the page words it.
function windowText(w) {
  return w ? ` · window ${(w.days || []).join(', ') || 'every day'} ${w.start}–${w.end} ${w.timeZone || 'UTC'}` : '';
}

// approval is the Approve button of a Manual workflow (of kind, one of gatedKinds) whose step
// waits for a person, with the command that does the same, or who approved it; and what the
// last approval tried said.
function approval(kind, obj, key, p) {
  const name = obj.metadata.name;
  // What the last approval said, while its step is the workflow's current one.
  const fb = approveFeedback[key] && p.current && p.current.name === approveFeedback[key].step ? approveFeedback[key] : null;
  const feedback = fb ? h('p', { class: `notice tone-${fb.tone} approve-feedback`, role: fb.tone === 'bad' ? 'alert' : 'status', tabindex: '-1', 'data-key': `${key}#feedback` },
    h('span', { 'aria-hidden': 'true' }, fb.tone === 'bad' ? '✖ ' : '✔ '), fb.text) : null;
  if (p.approvable) {
    return h('div', { class: 'actions approve' },
      h('button', { type: 'button', class: 'primary', 'data-key': `${key}#approve`, 'data-step': p.approvable, onclick: () => approveStep(kind, name, key, p.approvable) },
        `Approve ${p.approvable}`),
      h('p', { class: 'hint' }, 'Approves as you, as ', h('code', {}, `kubectl nodewright approve ${kind.ref}/${name} --step ${p.approvable}`), ' does.'),
      feedback);
  }
  if (p.approved) {
    return h('div', { class: 'actions approve' },
      h('p', { class: 'approved' }, h('span', { 'aria-hidden': 'true' }, '✔ '), `Step ${p.approved} approved`,
        p.approvedBy ? [' by ', h('strong', {}, p.approvedBy)] : '', '; it starts once its other gates open.'),
      feedback);
  }
  return feedback;
}

async function approveStep(kind, name, key, step) {
  const res = await api('POST', `/api/${kind.api}/${encodeURIComponent(name)}/approve`, { step });
  if (res.ok) {
    approveFeedback[key] = { step, tone: 'ok', text: (res.body.lines || []).join(' ') || `Approved step ${step}.` };
    announce(`Approved step ${step} of ${kind.noun} ${name}`);
  } else {
    const errs = (res.body.errors || [{ message: `HTTP ${res.status}` }]).map((e) => e.message).join('; ');
    approveFeedback[key] = { step, tone: 'bad', text: `Not approved: ${errs}` };
    announce(`Could not approve step ${step} of ${kind.noun} ${name}: ${errs}`);
  }
  render();
  focusKey(`${key}#feedback`);
}

// ---- OS version policies ---------------------------------------------------------------

// The node phases of an OS version policy, each with an icon and a tone besides its word.
const osNodeLooks = {
  Pending: ['○', 'neutral'], Draining: ['↻', 'info'], Staged: ['↻', 'info'], Rebooting: ['↻', 'info'],
  Verifying: ['↻', 'info'], Soaking: ['↻', 'info'], Done: ['✔', 'ok'], FellBack: ['↩', 'bad'], Failed: ['✖', 'bad'],
};

function renderOSPolicies() {
  renderCards('ospolicies', 'OSVersionPolicy', osCard,
    ['No OSVersionPolicy. Start one with ', h('code', {}, 'kubectl nodewright os plan --image REF'), '.']);
}

// bootedText is the image a node's agent last reported booted, with its boot entry (as os
// watch writes it).
function bootedText(n) {
  if (!n.bootedImage && !n.bootEntry) return '—';
  return `${n.bootedImage || '—'}${n.bootEntry ? ` (${n.bootEntry})` : ''}`;
}

function osCard(o) {
  const name = o.metadata.name;
  const key = `os/${name}`;
  const st = o.status || {};
  const p = o.progress || { nodes: [] };
  const nodes = p.nodes || [];
  const phase = st.phase || 'Pending';
  if (announced[key] && announced[key] !== phase) announce(`OS version policy ${name} is now ${phase}`);
  announced[key] = phase;
  const id = `os-${name}`;
  const spec = o.spec || {};
  const succeeded = condition(o, 'Succeeded');
  const preflight = (st.steps || []).find((s) => s.name === 'Preflight');
  const nodeAt = (position) => nodes.find((n) => n.position === position);
  const failedOn = p.failed && p.failedPosition && nodeAt(p.failedPosition) ? ` on node ${nodeAt(p.failedPosition).name} (${p.failedPosition} of ${nodes.length})` : '';
  return h('article', { class: `card migration ospolicy tone-edge-${(looks[phase] || [])[1] || 'neutral'}`, id, 'data-key': key, 'data-phase': phase, 'aria-labelledby': `${id}-title` },
    h('header', { class: 'card-head' },
      h('h3', { id: `${id}-title` }, name),
      badge(phase, { id: `${id}-phase` })),
    h('p', { class: 'sub' }, 'Image → ', h('strong', { class: 'mono image' }, spec.image),
      ` · done ${p.done || 0} of ${p.total || 0} · soak ${spec.soak || '10m'} · reboot timeout ${spec.rebootTimeout || '15m'}`,
      ` · VMs ${spec.vmProtection || 'LiveMigrate'} · recovery ${spec.upgradeRecovery || 'Never'} · approval ${spec.approval || 'Automatic'}`,
      windowText(spec.maintenanceWindow)),
    preflight ? stepItem(preflight) : null,
    nodes.length ? h('ol', { class: 'flip-nodes os-nodes', 'aria-label': `Nodes of ${name}, in the order they are upgraded` }, nodes.map((n) => {
      const [icon, tone] = osNodeLooks[n.phase] || ['•', 'neutral'];
      const current = p.current && p.currentPosition === n.position ? p.current : null;
      const failed = p.failed && p.failedPosition === n.position && (!current || current.name !== p.failed.name) ? p.failed : null;
      const evidence = n.evidence && (n.phase === 'FellBack' || n.phase === 'Failed');
      return h('li', { class: `flip-node ns-${n.phase}`, 'data-node': n.name, 'data-position': n.position, 'data-state': n.phase },
        h('span', { class: 'pos', 'aria-label': `position ${n.position}` }, n.position),
        h('span', { class: 'node-name' }, n.name),
        h('span', { class: 'modes mono booted' }, bootedText(n), n.part && n.phase !== 'Done' && n.phase !== 'Pending' ? h('span', { class: 'hint part' }, ` · part ${n.part}`) : ''),
        h('span', { class: `badge tone-${tone}`, 'data-phase': n.phase }, h('span', { class: 'icon', 'aria-hidden': 'true' }, icon), ' ', n.phase),
        current ? stepItem(current) : null,
        failed ? stepItem(failed) : null,
        evidence ? h('p', { class: 'step evidence mono' }, h('strong', {}, 'Evidence: '), n.evidence) : null);
    })) : h('p', { class: 'hint' }, 'The operator names the nodes when the policy starts.'),
    (p.heldNodes || []).length ? h('div', { class: 'held-nodes' }, h('strong', {}, 'Held (left alone):'),
      h('ul', {}, p.heldNodes.map((x) => h('li', { 'data-node': x.node }, h('span', { class: 'node-name' }, x.node), ': ', x.reason)))) : null,
    heldNotice(p),
    approval(gatedKinds.os, o, key, p),
    resultNotice(phase, succeeded, failedOn),
    (p.fellBack || []).length && finished.has(phase) ? h('p', { class: 'hint ack-hint' }, `${p.fellBack.join(', ')} fell back from the image. To try it there again: delete this policy and create a new one with `,
      h('code', {}, `kubectl nodewright os plan --image ${spec.image} --ack ${p.fellBack.join(',')}`), '.') : null,
    (st.steps || []).length ? details(`${key}#steps`, `All steps (${st.steps.length})`, steps(st)) : null);
}

// ---- Replication upgrades ------------------------------------------------------------

function renderUpgrades() {
  renderCards('upgrades', 'ReplicationUpgrade', upgradeCard,
    ['No ReplicationUpgrade. Start one with ', h('code', {}, 'kubectl nodewright upgrade --peer NODE'), '.']);
}

// stepsList lists steps (the six stages, or the rollback steps) in order, with the progress
// the operator writes under the one running.
function stepsList(list, progressText, cls, label) {
  return h('ol', { class: `steps ${cls}`, 'aria-label': label }, list.map((s) => h('li', { class: `step st-${s.state}`, 'data-step': s.name, 'data-state': s.state },
    h('span', { class: 'step-name' }, s.name), ' ', badge(s.state),
    s.startedAt && s.finishedAt ? h('span', { class: 'hint' }, ` ${seconds(new Date(s.finishedAt) - new Date(s.startedAt))}`)
      : s.startedAt && s.state === 'Running' ? h('span', { class: 'hint' }, ' started ', agoEl(s.startedAt)) : '',
    s.message ? h('span', { class: 'step-msg block' }, s.message) : '',
    s.state === 'Running' && progressText ? h('span', { class: 'stage-progress block' }, progressText) : '')));
}

// syncView is the initial synchronisation over every new replica, and the replicas still
// synchronising, the least done first.
function syncView(st, id) {
  if (st.syncPercent === undefined && !(st.syncing || []).length) return null;
  return h('div', { class: 'sync' },
    st.syncPercent !== undefined ? h('div', { class: 'progress' },
      h('label', { for: `${id}-sync` }, 'Synchronised'),
      h('progress', { id: `${id}-sync`, max: 100, value: st.syncPercent }, `${st.syncPercent} %`),
      h('span', { class: 'sync-percent' }, `${st.syncPercent} %`)) : null,
    (st.syncing || []).length ? h('table', { class: 'syncing' },
      h('caption', {}, `Replicas still synchronising, the least done first (${st.syncing.length})`),
      h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Volume'), h('th', { scope: 'col' }, 'Node'), h('th', { scope: 'col' }, 'Synchronised'))),
      h('tbody', {}, st.syncing.map((r) => h('tr', { 'data-resource': r.resource, 'data-node': r.node, 'data-percent': r.percent },
        h('td', { class: 'mono' }, r.resource), h('td', {}, r.node),
        h('td', { class: 'replica-sync' }, h('progress', { max: 100, value: r.percent, 'aria-label': `${r.resource} on ${r.node}` }), ` ${r.percent} %`))))) : null);
}

// goDuration shortens a duration as Go writes it: 6h0m0s is 6h, 10m0s 10m.
function goDuration(d) {
  return d.replace(/([hm])0s$/, '$1').replace(/h0m$/, 'h');
}

function upgradeCard(u) {
  const name = u.metadata.name;
  const key = `upgrade/${name}`;
  const st = u.status || {};
  const p = u.progress || { stages: [] };
  const phase = st.phase || 'Pending';
  if (announced[key] && announced[key] !== phase) announce(`Upgrade ${name} is now ${phase}`);
  announced[key] = phase;
  const id = `upgrade-${name}`;
  const spec = u.spec || {};
  const who = u.metadata.annotations && u.metadata.annotations['nodewright.spectrocloud.com/requested-by'];
  const v = st.volumes;
  const failedIn = p.failed && p.failedStage ? ` in stage ${p.failed.name} (${p.failedStage} of ${p.stages.length})` : '';
  const rollback = p.rollback || [];
  return h('article', { class: `card migration upgrade tone-edge-${(looks[phase] || [])[1] || 'neutral'}`, id, 'data-key': key, 'data-phase': phase, 'aria-labelledby': `${id}-title` },
    h('header', { class: 'card-head' },
      h('h3', { id: `${id}-title` }, name),
      badge(phase, { id: `${id}-phase` })),
    h('p', { class: 'sub' }, 'Peers ', h('strong', {}, (spec.peerNodes || []).join(', ')),
      spec.tiebreakerNode ? [' (', h('strong', {}, spec.tiebreakerNode), ' the tiebreaker, without data)'] : '',
      ` · ${spec.replicaCount || 2} replicas of each volume · sync timeout ${goDuration(spec.syncTimeout || '6h')} · approval ${spec.approval || 'Automatic'}`,
      windowText(spec.maintenanceWindow),
      who ? [' · requested by ', h('strong', { class: 'requested-by' }, who)] : ''),
    stepsList(p.stages, st.progress, 'stages', `Stages of ${name}, in order`),
    rollback.length ? [h('p', { class: 'rollback-title' }, h('span', { 'aria-hidden': 'true' }, '↶ '), 'Rollback'),
      stepsList(rollback, st.progress, 'rollback-steps', `Rollback steps of ${name}`)] : null,
    v ? h('dl', { class: 'facts volumes' },
      h('dt', {}, 'Volumes'), h('dd', {}, `${v.total}`, st.originalNode ? [' of ', h('strong', {}, st.originalNode)] : '',
        (st.dataNodes || []).length ? [', new replicas on ', h('strong', {}, st.dataNodes.join(', '))] : ''),
      h('dt', {}, 'Replicas placed'), h('dd', { 'data-count': 'placed' }, `${v.placed} of ${v.replicas}`),
      h('dt', {}, 'Up to date'), h('dd', { 'data-count': 'upToDate' }, `${v.upToDate} of ${v.total}`),
      h('dt', {}, 'Verified'), h('dd', { 'data-count': 'verified' }, `${v.verified} of ${v.total}`)) : null,
    syncView(st, id),
    heldNotice(p),
    approval(gatedKinds.upgrade, u, key, p),
    resultNotice(phase, condition(u, 'Succeeded'), failedIn));
}

// ---- The form ------------------------------------------------------------------------

const fieldInputs = { namespace: 'f-namespace', vm: 'f-vm', volume: 'f-volume', class: 'f-class', hot: 'f-hot', name: 'f-name', form: null };

// fieldFor places an error by the field path it names.
function fieldFor(path) {
  if (!path) return 'form';
  if (path === 'metadata.namespace') return 'namespace';
  if (path === 'metadata.name' || path === 'metadata.generateName') return 'name';
  if (path.startsWith('spec.vmName')) return 'vm';
  if (path.startsWith('spec.volumeName')) return 'volume';
  if (path.startsWith('spec.target.storageClassName')) return 'class';
  if (path.startsWith('spec.mode')) return 'hot';
  return 'form';
}

function clearErrors() {
  for (const [field, inputId] of Object.entries(fieldInputs)) {
    document.getElementById(`err-${field}`).textContent = '';
    if (inputId) document.getElementById(inputId).removeAttribute('aria-invalid');
  }
}

function showErrors(errors) {
  let first = null;
  for (const e of errors) {
    const field = fieldFor(e.field);
    const el = document.getElementById(`err-${field}`);
    el.replaceChildren(h('span', { 'aria-hidden': 'true' }, '✖ '), e.message);
    const inputId = fieldInputs[field];
    if (inputId) {
      document.getElementById(inputId).setAttribute('aria-invalid', 'true');
      if (!first) first = document.getElementById(inputId);
    }
  }
  return first;
}

async function submitForm(ev) {
  ev.preventDefault();
  const button = document.getElementById('start-button');
  const status = document.getElementById('form-status');
  clearErrors();
  const body = {
    namespace: document.getElementById('f-namespace').value,
    vmName: document.getElementById('f-vm').value,
    volumeName: document.getElementById('f-volume').value,
    storageClassName: document.getElementById('f-class').value,
    hot: document.getElementById('f-hot').checked,
    name: document.getElementById('f-name').value,
  };
  button.disabled = true;
  status.textContent = 'Sending to the API server…';
  const res = await api('POST', '/api/migrations', body);
  button.disabled = false;
  const warnings = (res.body.warnings || []).map((w) => h('span', { class: 'block hint' }, h('span', { 'aria-hidden': 'true' }, '▲ '), `Warning: ${w}`));
  if (res.ok) {
    status.className = 'form-status tone-ok';
    replace(status, h('span', { 'aria-hidden': 'true' }, '✔ '), `Created ${fixedNamespace ? '' : `${res.body.namespace}/`}${res.body.name}. It appears in the list of migrations and updates as it runs.`, warnings);
    document.getElementById('f-name').value = '';
    return;
  }
  const errors = res.body.errors || [{ message: `HTTP ${res.status}` }];
  const first = showErrors(errors);
  status.className = 'form-status tone-bad';
  replace(status, h('span', { 'aria-hidden': 'true' }, '✖ '), `Refused: ${errors.map((e) => e.message).join('; ')}`, warnings);
  if (first) first.focus();
}

let choices = null;

async function loadChoices() {
  const ns = fixedNamespace || document.getElementById('f-namespace').value;
  const res = await api('GET', `/api/choices?namespace=${encodeURIComponent(ns)}`);
  if (!res.ok) return;
  choices = res.body;
  replace(document.getElementById('vm-list'), choices.vms.map((v) => h('option', { value: v.name })));
  replace(document.getElementById('class-list'), choices.storageClasses.map((c) => h('option', { value: c.name }, c.provisioner)));
  updateVolumes();
}

function updateVolumes() {
  const vm = choices && choices.vms.find((v) => v.name === document.getElementById('f-vm').value);
  replace(document.getElementById('volume-list'), (vm ? vm.volumes : []).map((v) => h('option', { value: v })));
}

// ---- Namespace view (My VMs) ---------------------------------------------------------

// The namespace of the namespace view: the one of -n, or the kubeconfig context's. The view
// shows that namespace's VMs, the requests on them, their snapshots and migrations, and of the
// cluster only its phase, when the user may read it.
let viewNamespace = '';

// The operations' forms, by the prefix of their elements' ids.
const opForms = { snapshotnow: 'SnapshotNow', restore: 'Restore', restart: 'Restart', migratevolume: 'MigrateVolume' };
const opWords = { SnapshotNow: 'Snapshot now', Restore: 'Restore', Restart: 'Restart', MigrateVolume: 'Volume move' };
const unfinishedOps = new Set(['Pending', 'Waiting', 'Running']);

function inView(o) {
  return o.metadata && o.metadata.namespace === viewNamespace;
}

function newestFirst(a, b) {
  return new Date(b.metadata.creationTimestamp) - new Date(a.metadata.creationTimestamp) || a.metadata.name.localeCompare(b.metadata.name);
}

// nsTable is a table of rows, or what to say when there are none (or 'Loading…' until kind is
// listed).
function nsTable(el, kind, caption, heads, rows, empty) {
  if (!rows.length) {
    replace(el, h('p', { class: 'hint empty-row' }, store.synced[kind] ? empty : 'Loading…'));
    return;
  }
  replace(el, h('table', {},
    h('caption', { class: 'visually-hidden' }, caption),
    h('thead', {}, h('tr', {}, heads.map((x) => h('th', { scope: 'col' }, x)))),
    h('tbody', {}, rows)));
}

function vmState(vm) {
  if (vm.printableStatus) return vm.printableStatus;
  return vm.ready ? 'Running' : 'Not running';
}

function renderNamespace() {
  replace(document.getElementById('namespace-scope'), viewNamespace
    ? ['Namespace ', h('strong', { id: 'namespace-name' }, viewNamespace), ': its virtual machines, the operations asked for on them, their snapshots and their volume migrations, as your credentials may read them.']
    : '');
  const problems = problemsFor(['VirtualMachine', 'VMOperationRequest', 'VirtualMachineSnapshot', 'VMVolumeMigration']);
  if (store.problems.VMVolumeMigration && !fixedNamespace) {
    problems.push(h('p', { class: 'hint' }, 'Without -n the page lists the migrations of every namespace; to see only this one’s, start it with ',
      h('code', {}, `kubectl nodewright ui -n ${viewNamespace}`), '.'));
  }
  replace(document.getElementById('namespace-problems'), problems);

  // Of the cluster, only its phase, and only when the user may read it.
  const nwc = (store.objects.NodewrightCluster || {}).nodewright;
  const clusterEl = document.getElementById('namespace-cluster');
  clusterEl.hidden = !(nwc && nwc.status && nwc.status.phase);
  replace(clusterEl, clusterEl.hidden ? [] : [h('span', { class: 'label' }, 'Cluster phase '), badge(nwc.status.phase, { id: 'namespace-cluster-phase' })]);

  const vms = objects('VirtualMachine').filter(inView).sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
  nsTable(document.getElementById('ns-vms'), 'VirtualMachine', `Virtual machines of namespace ${viewNamespace}`,
    ['Name', 'State', 'Run strategy'],
    vms.map((vm) => {
      const state = vmState(vm);
      return h('tr', { 'data-vm': vm.metadata.name, 'data-running': String(state === 'Running') },
        h('th', { scope: 'row' }, vm.metadata.name),
        h('td', {}, badge(state, { tone: state === 'Running' ? 'ok' : 'neutral' })),
        h('td', {}, vm.runStrategy || '—'));
    }), `No VirtualMachine in namespace ${viewNamespace}.`);

  const reqEl = document.getElementById('ns-requests');
  const reqs = objects('VMOperationRequest').filter(inView).sort(newestFirst);
  if (!reqs.length) {
    replace(reqEl, h('p', { class: 'hint' }, store.synced.VMOperationRequest ? `No VMOperationRequest in namespace ${viewNamespace}. Ask for one with a form.` : 'Loading…'));
  } else {
    replace(reqEl, reqs.map(requestCard));
  }

  const snaps = objects('VirtualMachineSnapshot').filter(inView).sort(newestFirst);
  nsTable(document.getElementById('ns-snapshots'), 'VirtualMachineSnapshot', `Snapshots of the VMs of namespace ${viewNamespace}`,
    ['Name', 'VM', 'Phase', 'Ready', 'Created'],
    snaps.map((s) => h('tr', { 'data-snapshot': s.metadata.name, 'data-phase': s.phase || '' },
      h('th', { scope: 'row' }, s.metadata.name, s.error ? h('span', { class: 'why block' }, s.error) : ''),
      h('td', {}, s.vm),
      h('td', {}, s.phase ? badge(s.phase) : h('span', { class: 'hint' }, 'not reported')),
      h('td', {}, badge(s.readyToUse ? 'True' : 'False', { label: s.readyToUse ? 'Ready to use' : 'Not ready' })),
      h('td', {}, timeEl(s.creationTime || s.metadata.creationTimestamp)))),
    `No VirtualMachineSnapshot in namespace ${viewNamespace}.`);

  const migs = objects('VMVolumeMigration').filter(inView).sort(newestFirst);
  nsTable(document.getElementById('ns-migrations'), 'VMVolumeMigration', `Volume migrations of namespace ${viewNamespace}`,
    ['Name', 'VM', 'Volume', 'Phase'],
    migs.map((m) => {
      const spec = m.spec || {};
      const phase = (m.status && m.status.phase) || 'Pending';
      return h('tr', { 'data-migration': m.metadata.name, 'data-phase': phase },
        h('th', { scope: 'row' }, m.metadata.name),
        h('td', {}, spec.vmName), h('td', {}, spec.volumeName), h('td', {}, badge(phase)));
    }), `No VMVolumeMigration in namespace ${viewNamespace}.`);

  syncOpForms(vms, snaps);
}

function requestCard(r) {
  const name = r.metadata.name;
  const key = `vmop/${name}`;
  const st = r.status || {};
  const spec = r.spec || {};
  const phase = st.phase || 'Pending';
  if (announced[key] && announced[key] !== phase) announce(`Request ${name} is now ${phase}`);
  announced[key] = phase;
  const id = `vmop-${name}`;
  const who = spec.requester && spec.requester.username;
  const blocked = st.blockedBy || [];
  return h('article', { class: `card migration request tone-edge-${(looks[phase] || [])[1] || 'neutral'}`, id, 'data-key': key, 'data-phase': phase, 'aria-labelledby': `${id}-title` },
    h('header', { class: 'card-head' },
      h('h3', { id: `${id}-title` }, name),
      badge(phase, { id: `${id}-phase` })),
    h('p', { class: 'sub' }, h('strong', { class: 'operation' }, opWords[spec.operation] || spec.operation), ' of VM ', h('strong', { class: 'vm' }, spec.vm),
      spec.params && spec.params.snapshot ? [' from snapshot ', h('strong', {}, spec.params.snapshot)] : '',
      spec.params && spec.params.volume ? [', volume ', h('strong', { class: 'volume' }, spec.params.volume)] : '',
      spec.params && spec.params.storageClass ? [' to StorageClass ', h('strong', { class: 'storage-class' }, spec.params.storageClass)] : '',
      ' · asked by ', who ? h('strong', { class: 'requester' }, who) : h('span', { class: 'hint requester' }, 'not stamped yet'),
      ' ', agoEl(r.metadata.creationTimestamp)),
    blocked.length ? h('div', { class: 'notice tone-warn blocked-by' }, h('strong', {}, h('span', { 'aria-hidden': 'true' }, '‖ '), 'Waits for:'),
      h('ul', {}, blocked.map((b) => h('li', {}, b)))) : null,
    st.message ? h('p', { class: `message notice tone-${phase === 'Failed' || phase === 'Refused' ? 'bad' : 'neutral'}` }, st.message) : null,
    h('dl', { class: 'facts' },
      h('dt', {}, 'Step'), h('dd', { class: 'step-now' }, st.step || '—'),
      h('dt', {}, 'Queue position'), h('dd', { class: 'queue' }, st.queuePosition ? `${st.queuePosition}${st.queuePosition === 1 ? ' (runs next)' : ''}` : '—'),
      h('dt', {}, 'Approval'), h('dd', { class: 'approval' }, st.approval || '—', st.approvedBy ? [' by ', h('strong', {}, st.approvedBy)] : ''),
      st.window ? [h('dt', {}, 'Window'), h('dd', {}, st.window, st.nextWindowStart ? [', next opens ', timeEl(st.nextWindowStart)] : '')] : null,
      spec.reason ? [h('dt', {}, 'Reason'), h('dd', { class: 'reason' }, spec.reason)] : null,
      st.snapshot ? [h('dt', {}, 'Snapshot made'), h('dd', { class: 'mono' }, st.snapshot)] : null,
      st.restore ? [h('dt', {}, 'Restore'), h('dd', { class: 'mono' }, st.restore)] : null,
      st.migration ? [h('dt', {}, 'Volume migration'), h('dd', { class: 'mono migration-made' }, st.migration)] : null,
      st.startTime ? [h('dt', {}, 'Started'), h('dd', {}, timeEl(st.startTime))] : null,
      st.completionTime ? [h('dt', {}, 'Finished'), h('dd', {}, timeEl(st.completionTime))] : null),
    (st.conditions || []).length ? details(`${key}#conditions`, 'Conditions', conditionsTable(r, `Conditions of ${name}`)) : null);
}

// syncSelect gives a select the options [value, label] (after a first, empty one that says
// placeholder), keeping the choice; it changes nothing when they are the same, so that a
// re-render does not disturb a person choosing.
function syncSelect(sel, options, placeholder) {
  const want = [['', placeholder], ...options];
  const have = [...sel.options].map((o) => [o.value, o.textContent]);
  if (JSON.stringify(want) !== JSON.stringify(have)) {
    const chosen = sel.value;
    replace(sel, want.map(([v, label]) => h('option', { value: v }, label)));
    sel.value = want.some(([v]) => v === chosen) ? chosen : '';
  }
}

function syncOpForms(vms, snaps) {
  const vmOptions = vms.map((vm) => [vm.metadata.name, `${vm.metadata.name} (${vmState(vm)})`]);
  for (const prefix of Object.keys(opForms)) {
    syncSelect(document.getElementById(`${prefix}-vm`), vmOptions, vms.length ? 'Choose a VM' : 'No VM to choose');
  }
  const vm = document.getElementById('restore-vm').value;
  const own = vm ? snaps.filter((s) => s.vm === vm) : [];
  syncSelect(document.getElementById('restore-snapshot'),
    own.map((s) => [s.metadata.name, `${s.metadata.name} (${s.readyToUse ? 'ready' : s.phase || 'not ready'}, ${fmtTime(s.creationTime || s.metadata.creationTimestamp)})`]),
    !vm ? 'Choose the VM first' : own.length ? 'Choose a snapshot' : 'This VM has no snapshot');
  // A volume move offers that VM's volumes on a claim: the only ones a migration can move.
  const moving = vms.find((v) => v.metadata.name === document.getElementById('migratevolume-vm').value);
  const claims = moving ? (moving.volumes || []).filter((v) => v.claim) : [];
  syncSelect(document.getElementById('migratevolume-volume'), claims.map((v) => [v.name, v.name]),
    !moving ? 'Choose the VM first' : claims.length ? 'Choose a volume' : 'No volume of this VM is on a claim');
}

// storageClassChoices are the StorageClasses the user may list, as suggestions for a volume
// move; null until asked. A VM owner usually may not list them: the field then has no
// suggestions, and takes the name as typed.
let storageClassChoices = null;

async function loadStorageClasses() {
  const res = await api('GET', '/api/storageclasses');
  if (!res.ok) return;
  storageClassChoices = res.body;
  const input = document.getElementById('migratevolume-storageclass');
  const classes = storageClassChoices.listable ? storageClassChoices.storageClasses : [];
  replace(document.getElementById('migratevolume-class-list'), classes.map((c) => h('option', { value: c.name }, c.provisioner)));
  if (classes.length) input.setAttribute('list', 'migratevolume-class-list');
  else input.removeAttribute('list');
}

// opFieldsFor places a refusal by the field path it names: the fields it goes next to. The
// schema's rule for a volume move names spec.params as a whole, and says the volume and the
// StorageClass are both needed: it goes next to those of them left empty.
function opFieldsFor(prefix, path, body) {
  if (!path) return ['form'];
  if (path.startsWith('spec.vm')) return ['vm'];
  if (path.startsWith('spec.params.snapshot') && prefix === 'restore') return ['snapshot'];
  if (prefix === 'migratevolume') {
    if (path.startsWith('spec.params.volume')) return ['volume'];
    if (path.startsWith('spec.params.storageClass')) return ['storageclass'];
    if (path === 'spec.params') {
      const empty = [['volume', body.volume], ['storageclass', body.storageClass]].filter(([, v]) => !v.trim()).map(([f]) => f);
      if (empty.length) return empty;
    }
  }
  if (path.startsWith('spec.reason')) return ['reason'];
  return ['form'];
}

function clearOpErrors(prefix) {
  for (const el of document.querySelectorAll(`#op-${prefix} .error`)) el.textContent = '';
  for (const el of document.querySelectorAll(`#op-${prefix} [aria-invalid]`)) el.removeAttribute('aria-invalid');
}

async function submitOperation(ev) {
  ev.preventDefault();
  const form = ev.currentTarget;
  const prefix = form.dataset.prefix;
  const operation = form.dataset.operation;
  const button = document.getElementById(`${prefix}-submit`);
  const status = document.getElementById(`${prefix}-status`);
  clearOpErrors(prefix);
  const body = {
    namespace: viewNamespace,
    operation,
    vm: document.getElementById(`${prefix}-vm`).value,
    snapshot: prefix === 'restore' ? document.getElementById('restore-snapshot').value : '',
    volume: prefix === 'migratevolume' ? document.getElementById('migratevolume-volume').value : '',
    storageClass: prefix === 'migratevolume' ? document.getElementById('migratevolume-storageclass').value : '',
    reason: document.getElementById(`${prefix}-reason`).value,
  };
  button.disabled = true;
  status.className = 'form-status';
  status.textContent = 'Sending to the API server…';
  const res = await api('POST', '/api/vmoperationrequests', body);
  button.disabled = false;
  const warnings = (res.body.warnings || []).map((w) => h('span', { class: 'block hint' }, h('span', { 'aria-hidden': 'true' }, '▲ '), `Warning: ${w}`));
  if (res.ok) {
    status.className = 'form-status tone-ok';
    replace(status, h('span', { 'aria-hidden': 'true' }, '✔ '), `Asked: request ${res.body.name} was created. It appears under Requests and says there where it stands.`, warnings);
    document.getElementById(`${prefix}-reason`).value = '';
    return;
  }
  const errors = res.body.errors || [{ message: `HTTP ${res.status}` }];
  let first = null;
  for (const e of errors) {
    for (const field of opFieldsFor(prefix, e.field, body)) {
      document.getElementById(`${prefix}-err-${field}`).replaceChildren(h('span', { 'aria-hidden': 'true' }, '✖ '), e.message);
      const input = field === 'form' ? null : document.getElementById(`${prefix}-${field}`);
      if (input) {
        input.setAttribute('aria-invalid', 'true');
        if (!first) first = input;
      }
    }
  }
  status.className = 'form-status tone-bad';
  replace(status, h('span', { 'aria-hidden': 'true' }, '✖ '), `Refused: ${errors.map((e) => e.message).join('; ')}`, warnings);
  if (first) first.focus();
}

// ---- Audit page ----------------------------------------------------------------------

async function fetchTrail() {
  const res = await api('GET', '/api/trail');
  if (res.ok) {
    trail = res.body;
    render();
  }
}

function renderAudit() {
  replace(document.getElementById('audit-problems'), problemsFor(['AuditTrail']));
  const statusEl = document.getElementById('trail-status');
  const body = document.getElementById('trail-body');
  if (!store.trailGiven) {
    statusEl.className = 'card notice tone-warn';
    replace(statusEl, h('p', { id: 'trail-verification' }, h('span', { 'aria-hidden': 'true' }, '? '), h('strong', {}, 'No audit trail folder was given to this UI.')),
      h('p', {}, 'The operator keeps its trail inside its own pod, out of reach of your kubeconfig. To see it here, copy the trail’s folder (audit-*.jsonl files; the demo’s is .demo/audit) and give it, with the trail’s public key, when starting the UI.'));
    body.hidden = true;
    return;
  }
  if (!trail) {
    replace(statusEl, h('p', {}, 'Reading the trail…'));
    return;
  }
  const v = trail.verification;
  let head;
  if (trail.error) {
    statusEl.className = 'card notice tone-warn';
    head = h('p', { id: 'trail-verification' }, h('span', { 'aria-hidden': 'true' }, '? '), h('strong', {}, trail.error));
  } else if (v.status === 'verified' && !v.checkpoints) {
    statusEl.className = 'card notice tone-warn';
    head = h('p', { id: 'trail-verification' }, h('span', { 'aria-hidden': 'true' }, '▲ '), h('strong', {}, 'Intact, not signed yet: '),
      `the hash chain of ${v.entries} entries links up, but no signed checkpoint has been written yet, so a rewrite of the whole trail would not show.`);
  } else if (v.status === 'verified') {
    statusEl.className = 'card notice tone-ok';
    head = h('p', { id: 'trail-verification' }, h('span', { 'aria-hidden': 'true' }, '✔ '), h('strong', {}, 'Verified: '),
      `the hash chain of ${v.entries} entries is intact, and its ${v.checkpoints} signed checkpoint(s) check out with the key given`,
      v.lastCheckpoint ? [' (the last at ', timeEl(v.lastCheckpoint), ')'] : '', '.',
      v.unsigned ? ` The newest ${v.unsigned} entries come after the last checkpoint: the chain alone protects them.` : '');
  } else if (v.status === 'unverified') {
    statusEl.className = 'card notice tone-warn';
    head = h('p', { id: 'trail-verification' }, h('span', { 'aria-hidden': 'true' }, '? '), h('strong', {}, 'Not verified: '),
      'no public key was given, so the records below are shown as the files hold them.');
  } else {
    statusEl.className = 'card notice tone-bad';
    head = h('p', { id: 'trail-verification', role: 'alert' }, h('span', { 'aria-hidden': 'true' }, '✖ '), h('strong', {}, 'Verification failed: '),
      'the trail was changed or damaged.');
  }
  replace(statusEl, head,
    h('p', { class: 'hint' }, `Folder ${trail.dir}${trail.files ? `, ${trail.files.length} file(s)` : ''}. Updated as the files change.`),
    v && v.problems ? h('ul', { class: 'problems' }, v.problems.map((p) => h('li', {}, p))) : null,
    v && v.notes && v.notes.length ? details('trail-notes', 'Notes', h('ul', {}, v.notes.map((n) => h('li', {}, n)))) : null);
  body.hidden = false;
  renderRecords();
}

function renderRecords() {
  if (!trail) return;
  const q = document.getElementById('trail-filter').value.trim().toLowerCase();
  const rows = trail.records.filter((r) => !q || JSON.stringify(r).toLowerCase().includes(q));
  replace(document.getElementById('trail-caption'), `Newest first: ${rows.length} of ${trail.total} record(s)${q ? ` matching “${q}”` : ''}.`);
  replace(document.getElementById('trail-records'), rows.slice(0, 500).map((r) => {
    const subj = r.subject || {};
    const you = store.user && r.actor === store.user;
    return h('tr', { class: you ? 'is-you' : '' },
      h('td', {}, timeEl(r.time)),
      h('td', { class: 'actor' }, r.actor, you ? h('span', { class: 'you' }, ' (you)') : ''),
      h('td', {}, r.action),
      h('td', {}, h('span', { class: 'hint block' }, subj.kind), h('span', { class: 'mono' }, subj.namespace && subj.namespace !== fixedNamespace ? `${subj.namespace}/${subj.name}` : subj.name)),
      h('td', {}, r.from ? [r.from, ' → '] : '', h('strong', {}, r.to), r.reason ? h('span', { class: 'hint block' }, r.reason) : ''),
      h('td', { class: 'msg' }, r.message || ''));
  }));
}

// ---- Fleet page (ui --fleet: the API server is a fleet hub) ----------------------------

let fleetMode = false;
const fleetFilter = { degraded: false, profile: '', workflow: '', search: '' };
// fleetPageSize rows are drawn at a time: a hub of 3,500 members is read a page at a time.
const fleetPageSize = 100;
let fleetPage = 0;
// fleetRows are the rows drawn, by member, with the object each was drawn from: a row is
// drawn again only when its member's object changed (each upsert is a new object), so an
// update of a member elsewhere in the list leaves the page as it is.
let fleetRows = new Map();
let fleetDrawnOnce = false;

// fleetKeeps applies the filters, as kubectl nodewright fleet's flags do, and the search:
// every word in what internal/fleetview's SearchText gives (name, profile, versions, labels).
function fleetKeeps(m, words) {
  const s = m.status || {};
  if (fleetFilter.degraded && !m.view.degraded) return false;
  if (fleetFilter.profile && (!s.profile || s.profile.name !== fleetFilter.profile)) return false;
  const w = fleetFilter.workflow;
  if (w && !(s.workflows || []).some((x) => w === 'any' || x.kind === w)) return false;
  return words.every((word) => m.view.search.includes(word));
}

// fleetProfiles keeps the profile filter's choices to the profiles the members have, and the
// one chosen even when no member has it any more.
function fleetProfiles(members) {
  const names = new Set();
  for (const m of members) if (m.status && m.status.profile && m.status.profile.name) names.add(m.status.profile.name);
  if (fleetFilter.profile) names.add(fleetFilter.profile);
  const want = ['', ...[...names].sort()];
  const sel = document.getElementById('fleet-profile');
  const have = [...sel.options].map((o) => o.value);
  if (want.join('\n') !== have.join('\n')) {
    replace(sel, want.map((n) => h('option', { value: n }, n || 'Any')));
  }
  sel.value = fleetFilter.profile;
}

// fleetStates counts every member by state, as internal/fleetview CountStates does.
function fleetStates(members) {
  const c = { members: members.length, reachable: 0, unreachable: 0, unchecked: 0, degraded: 0, workflow: 0, mismatch: 0 };
  for (const m of members) {
    const v = m.view;
    if (v.reachable === 'True') c.reachable++;
    else if (v.reachable === 'False') c.unreachable++;
    else c.unchecked++;
    if (v.degraded) c.degraded++;
    if (((m.status || {}).workflows || []).length) c.workflow++;
    if (v.checkpoint === 'mismatch') c.mismatch++;
  }
  return c;
}

function renderStates(c) {
  const items = [
    ['members', c.members, 'members', false],
    ['reachable', c.reachable, 'reachable', false],
    ['unreachable', c.unreachable, 'unreachable', c.unreachable > 0],
    ['unchecked', c.unchecked, 'not checked yet', false],
    ['degraded', c.degraded, 'degraded', c.degraded > 0],
    ['workflow', c.workflow, 'running a workflow', false],
    ['mismatch', c.mismatch, 'checkpoint mismatch', c.mismatch > 0],
  ];
  const el = document.getElementById('fleet-states');
  const text = items.map(([, n]) => n).join(',');
  if (el.dataset.counts === text) return;
  el.dataset.counts = text;
  replace(el, items.map(([state, n, label, bad]) => h('li', { 'data-state': state, 'data-count': n, class: bad ? 'tone-bad' : '' },
    h('strong', {}, String(n)), label)));
}

// fleetVersions counts the members shown per version, as internal/fleetview CountVersions
// does: the most members first, then by value; an OS image a node fell back from is flagged.
function fleetVersions(shown) {
  const tally = () => new Map();
  const add = (map, key, n = 1) => map.set(key, (map.get(key) || 0) + n);
  const k8s = tally(); const nw = tally(); const profile = tally(); const images = tally(); const fell = tally();
  for (const m of shown) {
    add(k8s, m.view.kubernetes);
    add(nw, m.view.nodewright);
    add(profile, m.view.profile);
    for (const img of m.view.images) add(images, img);
    for (const f of ((m.status || {}).boots || {}).fellBack || []) if (f.nodes > 0) { add(fell, f.image, f.nodes); if (!images.has(f.image)) images.set(f.image, 0); }
  }
  const sorted = (map) => [...map.entries()].sort((a, b) => (b[1] - a[1]) || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  return { kubernetes: sorted(k8s), nodewright: sorted(nw), profile: sorted(profile), image: sorted(images), fell };
}

function renderVersions(shown) {
  const v = fleetVersions(shown);
  document.getElementById('fleet-versions').hidden = !shown.length;
  for (const key of ['kubernetes', 'nodewright', 'profile', 'image']) {
    const el = document.getElementById(`fleet-versions-${key}`);
    const text = JSON.stringify(v[key]) + (key === 'image' ? JSON.stringify([...v.fell]) : '');
    if (el.dataset.counts === text) continue;
    el.dataset.counts = text;
    replace(el, v[key].map(([value, n]) => {
      const fell = key === 'image' ? v.fell.get(value) : 0;
      return h('li', { 'data-value': value, 'data-count': n, class: fell ? 'fell-back' : '' },
        key === 'image' ? h('code', { class: 'image' }, value) : value, ` — ${n} member(s)`,
        fell ? [' ', badge('FellBack', { tone: 'bad', label: `fell back on ${fell} node(s)` })] : '');
    }));
  }
}

function memberRow(m) {
  const s = m.status || {};
  const v = m.view;
  const checkpoint = {
    ok: badge('ok', { tone: 'ok', label: 'ok' }),
    mismatch: badge('mismatch', { tone: 'bad', label: 'mismatch' }),
  }[v.checkpoint] || h('span', { class: 'hint' }, 'none yet');
  return h('tr', { 'data-member': m.metadata.name, 'data-degraded': String(v.degraded), class: v.degraded ? 'member degraded' : 'member' },
    h('th', { scope: 'row' }, h('strong', { class: 'member-name' }, m.metadata.name),
      v.degraded ? [' ', badge('Degraded', { label: 'Degraded' })] : '',
      v.degraded ? h('span', { class: 'why block' }, v.why.join(' · ')) : '',
      h('span', { class: 'act-with block' }, h('span', { class: 'hint' }, 'Act with '), h('code', { class: 'act', 'data-context': v.context }, v.command)),
      h('span', { class: 'hint block' }, [s.kubernetesVersion && `Kubernetes ${s.kubernetesVersion} · `, s.nodewrightVersion && `Nodewright ${s.nodewrightVersion} · `].filter(Boolean),
        'registered ', agoEl(m.metadata.creationTimestamp))),
    h('td', { 'data-col': 'reachable' }, badge(v.reachable), v.reachable !== 'True' ? h('span', { class: 'hint block' }, (condition(m, 'Reachable') || {}).reason || 'not checked yet') : ''),
    h('td', { 'data-col': 'phase' }, s.phase ? badge(s.phase) : h('span', { class: 'hint' }, 'none seen')),
    h('td', { 'data-col': 'nodes' }, v.nodes, v.fellBack && v.fellBack !== '-'
      ? h('span', { class: 'why block fell-back nowrap', title: v.fellBack }, `${s.boots.fellBackNodes} fell back`) : ''),
    h('td', { 'data-col': 'management' }, s.management || '–'),
    h('td', { 'data-col': 'workflows' }, (s.workflows || []).length ? h('ul', { class: 'plain' }, s.workflows.map((w) => h('li', {},
      h('span', { class: 'nowrap' }, `${w.kind}/${w.name}`), [w.step, w.progress].filter(Boolean).map((x) => ` ${x}`)))) : '–'),
    h('td', { 'data-col': 'profile' }, v.profile),
    h('td', { 'data-col': 'checkpoint' }, checkpoint,
      s.checkpoint ? h('span', { class: 'hint block' }, `recorded #${s.checkpoint.sequence}`) : ''));
}

// renderFellBack lists the images the shown members' nodes fell back from, their counts
// added as kubectl nodewright fleet's FELL BACK does (internal/fleetview FellBackImages).
function renderFellBack(shown) {
  const byImage = new Map();
  for (const m of shown) {
    for (const f of ((m.status || {}).boots || {}).fellBack || []) {
      if (!(f.nodes > 0)) continue;
      const e = byImage.get(f.image) || { image: f.image, nodes: 0, members: [] };
      e.nodes += f.nodes;
      if (!e.members.includes(m.metadata.name)) e.members.push(m.metadata.name);
      byImage.set(f.image, e);
    }
  }
  const images = [...byImage.values()].sort((a, b) => (b.nodes - a.nodes) || (a.image < b.image ? -1 : a.image > b.image ? 1 : 0));
  document.getElementById('fleet-fellback').hidden = !images.length;
  replace(document.getElementById('fleet-fellback-images'), images.map((e) => h('li', { 'data-image': e.image },
    h('code', { class: 'image' }, e.image), ` — ${e.nodes} node(s) on ${e.members.sort().join(', ')}`)));
}

function fleetOrder(a, b) {
  if (a.view.degraded !== b.view.degraded) return a.view.degraded ? -1 : 1;
  const x = a.metadata.name; const y = b.metadata.name;
  return x < y ? -1 : x > y ? 1 : 0;
}

function renderFleet() {
  replace(document.getElementById('fleet-problems'), problemsFor(['NodewrightClusterSummary']));
  const count = document.getElementById('fleet-count');
  const body = document.getElementById('fleet-members');
  if (!store.synced.NodewrightClusterSummary) {
    replace(count, 'Loading…');
    replace(body);
    fleetRows = new Map();
    return;
  }
  const members = objects('NodewrightClusterSummary');
  fleetProfiles(members);
  renderStates(fleetStates(members));
  members.sort(fleetOrder);
  const words = fleetFilter.search.toLowerCase().split(/\s+/).filter(Boolean);
  const shown = members.filter((m) => fleetKeeps(m, words));
  const pages = Math.max(1, Math.ceil(shown.length / fleetPageSize));
  fleetPage = Math.min(fleetPage, pages - 1);
  const first = fleetPage * fleetPageSize;
  const page = shown.slice(first, first + fleetPageSize);
  const degraded = members.filter((m) => m.view.degraded).length;
  replace(count, `${members.length} member(s), ${degraded} degraded`, shown.length !== members.length ? `; showing ${shown.length}` : '', '.');
  const pager = document.getElementById('fleet-pager');
  pager.hidden = pages <= 1;
  document.getElementById('fleet-page').textContent = shown.length ? `Members ${first + 1}–${first + page.length} of ${shown.length} · page ${fleetPage + 1} of ${pages}` : '';
  document.getElementById('fleet-prev').disabled = fleetPage === 0;
  document.getElementById('fleet-next').disabled = fleetPage >= pages - 1;
  renderFellBack(shown);
  renderVersions(shown);
  if (!page.length) {
    fleetRows = new Map();
    replace(body, h('tr', {}, h('td', { colspan: 8, class: 'empty-row' }, members.length ? 'No member matches the search or the filters.' : 'The hub has no member clusters.')));
  } else {
    const rows = new Map();
    const els = page.map((m) => {
      const had = fleetRows.get(m.metadata.name);
      const el = had && had.obj === m ? had.el : memberRow(m);
      rows.set(m.metadata.name, { obj: m, el });
      return el;
    });
    fleetRows = rows;
    const same = body.children.length === els.length && els.every((el, i) => body.children[i] === el);
    if (!same) replace(body, els);
  }
  if (!fleetDrawnOnce && members.length) {
    // The first draw of the members, for the browser test and the benchmark: the time from
    // the navigation to the table and the counts drawn.
    fleetDrawnOnce = true;
    performance.mark('nodewright-fleet-drawn', { detail: { members: members.length } });
  }
}

// fleetTurn moves to the previous or next page of members.
function fleetTurn(step) {
  fleetPage = Math.max(0, fleetPage + step);
  render();
  document.querySelector('#page-fleet .table-wrap').scrollTop = 0;
}

// ---- Plumbing ------------------------------------------------------------------------

async function api(method, url, body) {
  const opts = { method, headers: { 'X-Nodewright-Token': token }, credentials: 'omit', cache: 'no-store' };
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  try {
    const res = await fetch(url, opts);
    let parsed = {};
    try { parsed = await res.json(); } catch (_) { parsed = {}; }
    return { ok: res.ok, status: res.status, body: parsed };
  } catch (err) {
    return { ok: false, status: 0, body: { errors: [{ message: `The UI's server cannot be reached: ${err}` }] } };
  }
}

function focusKey(key) {
  const el = document.querySelector(`[data-key="${CSS.escape(key)}"]`);
  if (el) el.focus();
}

let renderQueued = false;
function render() {
  renderQueued = false;
  // Keep the keyboard focus on the same control across a re-render.
  const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.key : undefined;
  if (fleetMode) {
    renderFleet();
  } else {
    renderCluster();
    renderWorkflows();
    renderNamespace();
    renderAudit();
  }
  if (focused) {
    const el = document.querySelector(`[data-key="${CSS.escape(focused)}"]`);
    if (el && el !== document.activeElement) el.focus();
  }
}

function queueRender() {
  if (!renderQueued) {
    renderQueued = true;
    setTimeout(render, 0);
  }
}

function showPage() {
  const pages = fleetMode ? ['fleet'] : ['cluster', 'workflows', 'namespace', 'audit'];
  const page = (location.hash || `#${pages[0]}`).slice(1);
  const known = pages.includes(page) ? page : pages[0];
  for (const p of ['cluster', 'workflows', 'namespace', 'audit', 'fleet']) {
    document.getElementById(`page-${p}`).hidden = p !== known;
  }
  for (const a of document.querySelectorAll('nav a')) {
    if (a.dataset.page === known) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  document.title = `${{ cluster: 'Cluster', workflows: 'Workflows', namespace: 'My VMs', audit: 'Audit trail', fleet: 'Fleet' }[known]} · Nodewright`;
  if (known === 'workflows' && !choices && helloSeen) loadChoices();
}

function setConn(live, text) {
  const el = document.getElementById('conn');
  el.className = `conn ${live ? 'tone-ok' : 'tone-warn'}`;
  replace(el, h('span', { 'aria-hidden': 'true' }, live ? '● ' : '○ '), text);
}

// The scope the server was started with, from its hello.
function applyHello(d) {
  const first = !helloSeen;
  helloSeen = true;
  if (Boolean(d.fleet) !== fleetMode) {
    fleetMode = Boolean(d.fleet);
    for (const li of document.querySelectorAll('nav .nav-member')) li.hidden = fleetMode;
    for (const li of document.querySelectorAll('nav .nav-fleet')) li.hidden = !fleetMode;
    document.getElementById('who-verb').textContent = fleetMode ? 'Reading the hub as' : 'Acting as';
    showPage();
  }
  if (fleetMode) return;
  fixedNamespace = d.namespace || '';
  viewNamespace = fixedNamespace || d.defaultNamespace || '';
  const nsInput = document.getElementById('f-namespace');
  if (fixedNamespace) {
    nsInput.value = fixedNamespace;
    nsInput.readOnly = true;
    document.getElementById('scope').textContent = `Namespace ${fixedNamespace}`;
  } else if (first) {
    // The kubeconfig context's namespace, as kubectl would use it; the page lists them all.
    nsInput.value = d.defaultNamespace || 'default';
  }
  if (first && !document.getElementById('page-workflows').hidden) loadChoices();
  if (first) loadStorageClasses();
}

// signedOut says why the page cannot show anything: it was opened without the token, or with
// one this server does not know (it was restarted, say).
function signedOut(why) {
  setConn(false, 'Not signed in');
  const el = document.getElementById('signin');
  replace(el, h('p', {}, h('span', { 'aria-hidden': 'true' }, '✖ '), h('strong', {}, why), ' ',
    'Open the URL that ', h('code', {}, 'kubectl nodewright ui'), ' printed (it ends in ', h('code', {}, '#token=…'), ') in this browser.'));
  el.hidden = false;
}

// The event stream, read with fetch: EventSource cannot send the token's header. A stream that
// ends or fails is opened again after a pause, and the page starts again from its hello.
async function connect() {
  if (!token) {
    signedOut('This page was opened without its token.');
    return;
  }
  const handlers = {
    hello: (d) => {
      store.objects = {}; store.problems = {}; store.synced = {}; store.timeline = [];
      store.user = d.user; store.trailGiven = d.trailGiven; store.ready = false;
      document.getElementById('user').textContent = d.user || 'the kubeconfig’s user';
      applyHello(d);
      if (d.trailGiven) fetchTrail();
    },
    upsert: (d) => { (store.objects[d.kind] = store.objects[d.kind] || {})[d.key] = d.object; },
    delete: (d) => { if (store.objects[d.kind]) delete store.objects[d.kind][d.key]; },
    reset: (d) => { delete store.objects[d.kind]; delete store.synced[d.kind]; delete store.problems[d.kind]; },
    synced: (d) => { store.synced[d.kind] = true; },
    problem: (d) => { if (d.message) store.problems[d.kind] = d.message; else delete store.problems[d.kind]; },
    timeline: (d) => { store.timeline = d || []; },
    transition: (d) => { store.timeline.push(d); },
    trail: () => { fetchTrail(); },
    ready: () => { store.ready = true; setConn(true, 'Live'); },
  };
  let pause = 500;
  for (;;) {
    try {
      const res = await fetch('/api/events', { headers: { 'X-Nodewright-Token': token }, credentials: 'omit', cache: 'no-store' });
      if (res.status === 401) {
        signedOut('The UI’s server does not know this page’s token.');
        return;
      }
      if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}`);
      setConn(true, 'Live');
      pause = 500;
      await readEvents(res.body, (name, data) => {
        const fn = handlers[name];
        if (fn) { fn(JSON.parse(data)); queueRender(); }
      });
    } catch (_) {
      // Reconnect below.
    }
    setConn(false, 'Reconnecting…');
    await new Promise((resolve) => { setTimeout(resolve, pause); });
    pause = Math.min(pause * 2, 5000);
  }
}

// readEvents parses a text/event-stream body until it ends, calling on(name, data) per event.
async function readEvents(body, on) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value.replace(/\r\n?/g, '\n');
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let name = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line === '' || line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? '' : line.slice(colon + 1);
        if (val.startsWith(' ')) val = val.slice(1);
        if (field === 'event') name = val;
        else if (field === 'data') data.push(val);
      }
      if (data.length) on(name, data.join('\n'));
    }
  }
}

// The page's own clock: ages ("12 s ago") stay current between updates.
function tick() {
  for (const el of document.querySelectorAll('[data-since]')) el.textContent = ago(el.dataset.since);
}

document.addEventListener('DOMContentLoaded', () => {
  document.getElementById('f-namespace').addEventListener('change', loadChoices);
  document.getElementById('f-vm').addEventListener('input', updateVolumes);
  document.getElementById('start-form').addEventListener('submit', submitForm);
  for (const prefix of Object.keys(opForms)) document.getElementById(`op-${prefix}`).addEventListener('submit', submitOperation);
  document.getElementById('restore-vm').addEventListener('change', render);
  document.getElementById('migratevolume-vm').addEventListener('change', render);
  // Asked again as the field is entered: a right to list them granted since shows.
  document.getElementById('migratevolume-storageclass').addEventListener('focus', loadStorageClasses);
  document.getElementById('trail-filter').addEventListener('input', renderRecords);
  // A new search or filter starts again at the first page.
  document.getElementById('fleet-search').addEventListener('input', (ev) => { fleetFilter.search = ev.target.value; fleetPage = 0; render(); });
  document.getElementById('fleet-degraded').addEventListener('change', (ev) => { fleetFilter.degraded = ev.target.checked; fleetPage = 0; render(); });
  document.getElementById('fleet-profile').addEventListener('change', (ev) => { fleetFilter.profile = ev.target.value; fleetPage = 0; render(); });
  document.getElementById('fleet-workflow').addEventListener('change', (ev) => { fleetFilter.workflow = ev.target.value; fleetPage = 0; render(); });
  document.getElementById('fleet-prev').addEventListener('click', () => fleetTurn(-1));
  document.getElementById('fleet-next').addEventListener('click', () => fleetTurn(1));
  window.addEventListener('hashchange', () => { showPage(); document.getElementById('main').focus(); });
  showPage();
  connect();
  setInterval(tick, 1000);
});
