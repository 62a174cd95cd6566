// The triage page's controller: input (paste, drop, file picker, optional
// release/hardware/model), the API calls, the permalink route /t/{id},
// polling while replay or an on-demand ingest runs in the background, and the API key field.

import { clear, h, parseCitation } from "./dom.js";
import { renderTriage } from "./render.js";

const KEY_STORAGE = "sglang-triage.api-key";
const PERMALINK = /^\/t\/([A-Za-z0-9_-]{1,64})\/?$/;
// seconds between checks while replay is pending (about three minutes in all)
const POLL_DELAYS = [2, 3, 5, 8, 13, 20, 30, 40, 60];

const $ = (id) => document.getElementById(id);
const els = {};
let current = null; // the record on display: {id, result, confirmation}
let pollToken = 0;

class ApiError extends Error {
  constructor(status, body) {
    super((body && (typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail)))
      || `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

function apiKey() {
  try {
    return sessionStorage.getItem(KEY_STORAGE) || "";
  } catch (_err) {
    return "";
  }
}

/** fetch() with the API key (when one is set) and JSON in and out; throws ApiError on 4xx/5xx. */
async function api(method, path, body) {
  const headers = { accept: "application/json" };
  const key = apiKey();
  if (key) headers.authorization = `Bearer ${key}`;
  const init = { method, headers };
  if (body !== undefined) {
    headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, { detail: `the service could not be reached (${err.message})` });
  }
  const text = await resp.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch (_err) {
    data = { detail: text.slice(0, 500) };
  }
  if (!resp.ok) throw new ApiError(resp.status, data);
  return data;
}

function announce(msg) {
  els.status.textContent = "";
  // a fresh text node so that repeating the same message is announced again
  window.setTimeout(() => { els.status.textContent = msg; }, 30);
}

function permalinkUrl(id) {
  return new URL(`/t/${encodeURIComponent(id)}`, window.location.origin).href;
}

const ctx = {
  announce,
  permalink: permalinkUrl,
  source: (citation, context) => {
    const c = parseCitation(citation);
    if (!c) return Promise.reject(new Error(`not a citation: ${citation}`));
    const q = new URLSearchParams({ release: c.release, path: c.path, start: c.start, end: c.end,
      context: context || 0 });
    return api("GET", `/source?${q}`);
  },
  confirm: async (fix, note) => {
    if (!current || !current.id) throw new Error("no stored triage");
    await api("POST", `/incidents/${encodeURIComponent(current.id)}/confirm`, { fix, note, source: "web" });
    const rec = await api("GET", `/triage/${encodeURIComponent(current.id)}`);
    show(rec, { focus: false });
    announce("Thanks: the fix is recorded as confirmed.");
    const banner = $("confirmed");
    if (banner) banner.focus();
  },
};

// ------------------------------------------------------------------ display
function show(record, { focus = true } = {}) {
  current = record;
  hideError();
  els.result.hidden = false;
  renderTriage(els.result, record, ctx);
  const banner = $("confirmed");
  if (banner) banner.setAttribute("tabindex", "-1");
  document.title = `${record.result.summary ? record.result.summary.slice(0, 60) : "Triage"} · sglang-triage`;
  if (focus) {
    const head = $("summary-h");
    if (head) head.focus();
  }
}

function hideError() {
  els.error.hidden = true;
  clear(els.error);
}

function showError(err, what) {
  els.result.hidden = true;
  clear(els.result);
  clear(els.error);
  const body = (err && err.body) || {};
  const status = err && err.status;
  const title = status === 401 ? "An API key is needed"
    : status ? `${what} failed (HTTP ${status}${body.error ? `, ${body.error}` : ""})` : `${what} failed`;
  const parts = [h("h2", { id: "error-h", tabindex: "-1" }, title), h("p", { class: "error-detail" }, err.message)];
  if (status === 401) {
    parts.push(h("p", {}, "Enter a key under “API key” at the top of the page and try again."));
    els.keyDetails.open = true;
  }
  const understood = body.understood;
  if (understood && typeof understood === "object") {
    parts.push(h("h3", {}, "What was understood from the log"),
      h("dl", { class: "facts understood" }, Object.entries(understood).flatMap(([k, v]) => [
        h("dt", {}, k.replace(/_/g, " ")),
        h("dd", {}, h("code", {}, describe(v)))])));
  }
  const extra = Object.fromEntries(Object.entries(body).filter(([k]) => !["detail", "error", "understood"].includes(k)));
  if (Object.keys(extra).length) {
    parts.push(h("details", {}, h("summary", {}, "Details"),
      h("pre", { class: "code-block" }, h("code", {}, JSON.stringify(extra, null, 2)))));
  }
  els.error.append(...parts);
  els.error.hidden = false;
  $("error-h").focus();
}

function describe(value) {
  if (value === null || value === undefined) return "none";
  if (Array.isArray(value)) return value.length ? value.map((v) => (typeof v === "string" ? v : JSON.stringify(v))).join(" ") : "none";
  if (typeof value === "object") return Object.keys(value).length ? JSON.stringify(value) : "none";
  return String(value);
}

function setBusy(busy, msg) {
  els.submit.disabled = busy;
  els.form.setAttribute("aria-busy", busy ? "true" : "false");
  els.submit.textContent = busy ? "Triaging…" : "Triage";
  if (msg) announce(msg);
}

// --------------------------------------------------------------- triage flow
async function submit() {
  const log = els.log.value;
  if (!log.trim()) {
    announce("Paste a crash log or choose a file first.");
    els.log.focus();
    return;
  }
  const body = { log };
  for (const [key, el] of [["release", els.release], ["hardware", els.hardware],
    ["model", els.model], ["model_arch", els.modelArch]]) {
    const v = el.value.trim();
    if (v) body[key] = v;
  }
  setBusy(true, "Triaging the log…");
  try {
    const result = await api("POST", "/triage", body);
    const record = { id: result.id, result, confirmation: null };
    if (result.id && window.location.pathname !== `/t/${result.id}`) {
      window.history.pushState({ id: result.id }, "", `/t/${encodeURIComponent(result.id)}`);
    }
    show(record);
    announce(`Done: ${result.summary}`);
    pollReplay(record);
  } catch (err) {
    showError(err, "Triage");
    announce(`Triage failed: ${err.message}`);
  } finally {
    setBusy(false);
  }
}

async function loadStored(id) {
  announce("Loading the stored triage…");
  try {
    const rec = await api("GET", `/triage/${encodeURIComponent(id)}`);
    restoreInput(rec.request || {});
    show({ id: rec.id, result: rec.result, confirmation: rec.confirmation, created: rec.created });
    announce(`Loaded: ${rec.result.summary}`);
    pollReplay(current);
  } catch (err) {
    showError(err, `Loading triage ${id}`);
  }
}

/** Put a stored triage's log and model back into an empty form, so it can be edited and re-run. */
function restoreInput(request) {
  if (!els.log.value.trim() && typeof request.log === "string") els.log.value = request.log;
  const model = (request.options || {}).model;
  if (!els.model.value.trim() && typeof model === "string") els.model.value = model;
}

/** What a stored answer still waits for: "ingest" (its release is being ingested on
 * demand; the answer will be replaced), "replay" (verdicts pending) or null. */
function waitingFor(result) {
  const onDemand = (result.release || {}).on_demand;
  if (onDemand && onDemand.status === "ingesting") return "ingest";
  return result.replay && result.replay.status === "pending" ? "replay" : null;
}

/** While the stored triage waits for replay or an on-demand ingest, re-read it a few times
 * with growing pauses; show it once that changed (and keep polling if it waits for more). */
function pollReplay(record) {
  const token = ++pollToken;
  const waited = record.id ? waitingFor(record.result) : null;
  if (!waited) return;
  let i = 0;
  const tick = async () => {
    if (token !== pollToken) return; // another triage is on display
    try {
      const rec = await api("GET", `/triage/${encodeURIComponent(record.id)}`);
      if (token !== pollToken) return;
      if (waitingFor(rec.result) !== waited) {
        const shown = { id: rec.id, result: rec.result, confirmation: rec.confirmation, created: rec.created };
        show(shown, { focus: false });
        const onDemand = rec.result.release.on_demand || {};
        announce(waited === "ingest"
          ? `Release ${onDemand.release} ${onDemand.status}: the answer is updated`
          : `Replay finished: ${String((rec.result.replay || {}).status || "done").replace("_", " ")}`);
        pollReplay(shown);
        return;
      }
    } catch (_err) {
      // keep trying: a transient error must not end the wait
    }
    if (i < POLL_DELAYS.length) {
      window.setTimeout(tick, POLL_DELAYS[i++] * 1000 * (window.__triagePollScale || 1));
    } else {
      announce(waited === "ingest"
        ? "The release is still being ingested; reload this permalink later for the updated answer."
        : "Replay is still running; reload this permalink later for its verdicts.");
    }
  };
  window.setTimeout(tick, POLL_DELAYS[i++] * 1000 * (window.__triagePollScale || 1));
}

function route() {
  const m = PERMALINK.exec(window.location.pathname);
  if (m) {
    loadStored(decodeURIComponent(m[1]));
  } else {
    pollToken++;
    current = null;
    els.result.hidden = true;
    clear(els.result);
    hideError();
    document.title = "sglang-triage";
  }
}

// -------------------------------------------------------------- the options
function fillSelect(select, items, label) {
  const keep = select.value;
  while (select.options.length > 1) select.remove(1);
  for (const it of items) select.append(h("option", { value: it.value }, it.label || it.value));
  if (keep) select.value = keep;
  select.disabled = false;
  select.setAttribute("aria-label", label);
}

async function loadOptions() {
  try {
    const releases = await api("GET", "/releases");
    fillSelect(els.release, releases.map((r) => ({ value: r.version,
      label: `${r.version}${r.status && r.status !== "ready" ? ` (${r.status})` : ""}` })), "Release");
    const hw = await api("GET", "/hardware");
    fillSelect(els.hardware, hw.profiles.map((p) => ({ value: p.name,
      label: p.vendor === "cpu" ? "CPU only" : `${p.name} (${p.count}× ${p.gpu})` })), "Hardware");
    fillSelect(els.modelArch, hw.model_archs.map((a) => ({ value: a })), "Model architecture");
    els.optionsNote.textContent = "";
  } catch (err) {
    els.optionsNote.textContent = err.status === 401
      ? "This server needs an API key: enter it under “API key” to list releases and hardware."
      : `Could not load the options: ${err.message}`;
    if (err.status === 401) els.keyDetails.open = true;
  }
}

// ---------------------------------------------------------- input handling
async function readFile(file) {
  if (!file) return;
  if (file.size > 4 * 1024 * 1024) {
    announce(`${file.name} is too large (${Math.round(file.size / 1024)} KiB).`);
    return;
  }
  els.log.value = await file.text();
  els.fileName.textContent = `Loaded ${file.name} (${file.size} bytes)`;
  announce(`Loaded ${file.name}`);
  els.log.focus();
}

function bindInput() {
  els.form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    submit();
  });
  els.log.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      submit();
    }
  });
  els.fileButton.addEventListener("click", () => els.file.click());
  els.file.addEventListener("change", () => {
    readFile(els.file.files[0]);
    els.file.value = "";
  });
  const zone = els.drop;
  for (const type of ["dragenter", "dragover"]) {
    zone.addEventListener(type, (ev) => {
      ev.preventDefault();
      zone.classList.add("dragging");
    });
  }
  for (const type of ["dragleave", "dragend"]) zone.addEventListener(type, () => zone.classList.remove("dragging"));
  zone.addEventListener("drop", (ev) => {
    ev.preventDefault();
    zone.classList.remove("dragging");
    const files = ev.dataTransfer && ev.dataTransfer.files;
    if (files && files.length) readFile(files[0]);
    else if (ev.dataTransfer) {
      const text = ev.dataTransfer.getData("text/plain");
      if (text) els.log.value = text;
    }
  });
  els.clear.addEventListener("click", () => {
    els.log.value = "";
    els.fileName.textContent = "";
    if (PERMALINK.test(window.location.pathname)) window.history.pushState({}, "", "/");
    route();
    els.log.focus();
  });
}

function bindKey() {
  els.key.value = apiKey();
  els.keyState.textContent = apiKey() ? "A key is set for this tab." : "No key set.";
  els.keyForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const v = els.key.value.trim();
    try {
      if (v) sessionStorage.setItem(KEY_STORAGE, v);
      else sessionStorage.removeItem(KEY_STORAGE);
    } catch (_err) {
      // storage disabled: the key lasts until the page is closed
    }
    els.keyState.textContent = v ? "Key saved for this tab." : "Key cleared.";
    announce(els.keyState.textContent);
    loadOptions();
    if (PERMALINK.test(window.location.pathname)) route();
  });
}

function init() {
  for (const id of ["form", "log", "drop", "file", "fileButton", "fileName", "clear", "release", "hardware",
    "model", "modelArch", "submit", "status", "result", "error", "optionsNote", "key", "keyForm", "keyState",
    "keyDetails"]) {
    els[id] = $(id.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`));
  }
  bindInput();
  bindKey();
  window.addEventListener("popstate", route);
  loadOptions();
  route();
  document.documentElement.dataset.ready = "true";
}

init();
