// Rendering of one triage (the JSON of POST /triage, or GET /triage/{id}'s
// record) into the result area. Pure DOM building with text nodes; the
// callbacks in `ctx` do the network work:
//   ctx.announce(msg)                  polite status message
//   ctx.source(citation, context)      -> Promise of GET /source's JSON
//   ctx.confirm(fix, note)             -> Promise (POST /incidents/{id}/confirm)
//   ctx.permalink(id)                  -> absolute URL of the permalink

import { clear, copyButton, dedent, h, inline, miniMarkdown, parseCitation, pct, show } from "./dom.js";

const VALUE_LABEL = { true: "true", false: "false", unknown: "unknown" };

/** Render `record` ({id, result, confirmation, created?}) into `root`. */
export function renderTriage(root, record, ctx) {
  clear(root);
  const r = record.result;
  const parts = [
    summarySection(record, ctx),
    confirmationBanner(record),
    codeSection(r, ctx),
    evaluationSection(r),
    fixesSection(record, ctx),
    replaySection(r),
    unknownsSection(r),
    similarSection(r),
    referencesSection(r, ctx),
  ];
  root.append(...parts.filter(Boolean));
}

function section(id, title, ...children) {
  return h("section", { class: "card", id, "aria-labelledby": `${id}-h` },
    h("h2", { id: `${id}-h` }, title), ...children);
}

function badge(text, kind) {
  return h("span", { class: `badge badge-${kind || "neutral"}` }, text);
}

function valueBadge(value) {
  const kind = value === "true" ? "true" : value === "false" ? "false" : "unknown";
  return badge(VALUE_LABEL[value] || String(value), kind);
}

function row(label, ...value) {
  return [h("dt", {}, label), h("dd", {}, ...value)];
}

// ------------------------------------------------------------------ summary
function summarySection(record, ctx) {
  const r = record.result;
  const rel = r.release || {};
  const p = r.parsed || {};
  const conf = typeof r.confidence === "number" ? r.confidence : 0;
  const facts = h("dl", { class: "facts" },
    row("Status", badge(r.status, r.status === "located" ? "ok" : "warn")),
    row("Confidence", h("meter", { min: 0, max: 1, value: conf, "aria-label": "confidence" }),
      ` ${pct(conf)}`),
    row("Release", `${rel.release || "?"} `, h("span", { class: "muted" },
      `(${rel.method || "?"}, confidence ${pct(rel.confidence)})`)),
    row("Hardware", ...hardwareValue(r.hardware, p.hardware)),
    rel.range && (rel.range.releases || []).length ? row("Release range", rel.range.text || "",
      h("ul", { class: "notes" }, (rel.range.evidence || []).filter((e) => e.used)
        .map((e) => h("li", {}, e.text)).concat((rel.range.differences || [])
          .map((d) => h("li", {}, d))))) : null,
    r.upgrade ? row("Later releases", r.upgrade) : null,
    r.rule ? row("Rule", h("span", { id: "rule-text" }, inline(r.rule))) : null,
    (r.printed || []).length ? row("Printed in the message", h("span", { id: "printed" },
      r.printed.map((v) => `${v.expr}=${v.text}${v.attr ? ` (${v.attr})` : ""}`).join(", "))) : null,
    r.arithmetic ? row("Arithmetic", h("span", { id: "arithmetic" }, inline(r.arithmetic))) : null,
    (r.model_facts || []).length ? row("Model facts", h("span", { id: "model-facts" }, modelFactsText(r.model_facts))) : null,
    r.fix_search ? row("Fix search", h("span", { id: "fix-search" }, fixSearchText(r.fix_search))) : null,
    p.exception ? row("Exception", h("code", {}, p.exception + (p.message ? `: ${p.message}` : ""))) : null,
    p.python ? row("Python", p.python) : null,
    p.model ? row("Model", h("code", {}, p.model)) : null,
    p.model_arch ? row("Architecture", p.model_arch) : null,
  );
  const url = record.id ? ctx.permalink(record.id) : null;
  const link = url ? h("p", { class: "permalink" },
    h("span", { class: "label" }, "Permalink: "),
    h("a", { href: url, id: "permalink" }, url), " ",
    copyButton("Copy link", () => url, ctx.announce, { "aria-label": "Copy the permalink" })) : null;
  const explanation = r.explanation ? h("details", { class: "explanation" },
    h("summary", {}, "Explanation"), ...miniMarkdown(r.explanation)) : null;
  return h("section", { class: "card summary-card", id: "summary", "aria-labelledby": "summary-h" },
    h("h2", { id: "summary-h", tabindex: "-1" }, "Diagnosis"),
    h("p", { class: "summary", id: "summary-text" }, r.summary || ""),
    facts,
    rel.note ? h("p", { class: "note" }, rel.note) : null,
    ...(r.degraded || []).map((d) => h("p", { class: "note warn" }, `Degraded: ${d}`)),
    (p.notes || []).length ? h("ul", { class: "notes" }, p.notes.map((n) => h("li", {}, n))) : null,
    link, explanation);
}

/** The hardware profile used and where it came from: `h100-x8 (from the log: “GPU 0: …”)`
 * or `b200-x8 (declared)`; the evidence line cut at 120 characters, in full (with how the
 * profile was chosen) as the tooltip. Without a source: the declared name, or "not declared". */
function hardwareValue(hw, declared) {
  if (!hw || !hw.name) return [declared || h("span", { class: "muted" }, "not declared")];
  const evidence = String(hw.evidence || "").split(/\s+/).join(" ").trim();
  const short = evidence.length > 120 ? `${evidence.slice(0, 117).trimEnd()}...` : evidence;
  const where = hw.source === "detected" ? "detected" : "from the log";
  const text = hw.source === "request" ? "(declared)"
    : (short ? `(${where}: “${short}”)` : `(${where})`);
  const tip = [evidence, hw.detail].filter(Boolean).join(" — ");
  return [h("span", { id: "hardware-name" }, hw.name), " ",
    h("small", { class: "muted", id: "hardware-source", title: tip || null }, text)];
}

/** `quantization=fp8 (config.json), mla=true (known_model)`: the checkpoint facts used. */
function modelFactsText(facts) {
  const value = (v) => (Array.isArray(v) ? v.join(" ") : typeof v === "string" ? v : JSON.stringify(v));
  return facts.map((f) => `${f.name}=${value(f.value)} (${f.source})`).join(", ");
}

/** The replay-backed fix search in one line (the CLI's and Slack's wording). */
function fixSearchText(search) {
  const status = String(search.status || "unknown");
  const detail = String(search.detail || "").trim();
  const text = detail.toLowerCase().startsWith(status.toLowerCase()) ? detail
    : (detail ? `${status}: ${detail}` : status);
  const extra = [];
  if (search.candidates !== undefined && search.candidates !== null) extra.push(`${search.candidates} replayed`);
  if (typeof search.seconds === "number") extra.push(`${Math.round(search.seconds)} s`);
  return text + (extra.length ? ` (${extra.join(", ")})` : "");
}

function confirmationBanner(record) {
  const c = record.confirmation;
  if (!c) return null;
  const fix = c.fix || {};
  return h("p", { class: "card confirmed", id: "confirmed", role: "status" },
    h("strong", {}, "Confirmed: "), `this fix worked (${editText(fix)})`,
    c.note ? ` — “${c.note}”` : "", c.created ? h("span", { class: "muted" }, ` · ${c.created}`) : null);
}

// ------------------------------------------------------------- failing code
/** Source lines as a numbered table; the common indentation is cut so narrow screens show code. */
function codeTable(lines, reported) {
  const indents = lines.filter((l) => (l.text || "").trim()).map((l) => l.text.match(/^ */)[0].length);
  const cut = indents.length ? Math.min(...indents) : 0;
  const rows = lines.map((l) => h("tr", { class: l.highlight ? "hl" : "", dataset: { line: l.line } },
    h("td", { class: "ln" }, String(l.line)),
    h("td", { class: "mark", "aria-hidden": "true" }, l.highlight ? "❱" : ""),
    h("td", { class: "src" }, h("code", {}, (l.text || "").slice(cut) || " "),
      l.highlight ? h("span", { class: "sr-only" }, " (the failing check)") : null)));
  return h("div", { class: "code", role: "region", tabindex: "0",
    "aria-label": reported ? `Source around ${reported}` : "Source excerpt" },
  h("table", {}, h("tbody", {}, rows)));
}

function codeSection(r, ctx) {
  const loc = r.location;
  if (!loc) {
    return section("code", "Failing code", h("p", { class: "muted" },
      r.status === "argparse" ? "The log ends in an argparse error: no check in the source fired."
        : "The failing check could not be located in this release."));
  }
  const release = (r.release || {}).release;
  const where = h("p", {}, h("code", {}, loc.function), " at ",
    h("code", { class: "citation" }, loc.citation), " ",
    h("span", { class: "muted" }, `(located by ${loc.method.replace("_", " ")}, ${pct(loc.confidence)})`));
  const reported = loc.reported_line && loc.reported_line !== loc.start_line
    ? h("p", { class: "muted" }, `The log reports line ${loc.reported_line}; in ${release} the check is at `
      + `line ${loc.start_line}.`) : null;
  const box = h("div", { class: "code-wrap" }, codeTable(loc.excerpt || [], loc.citation));
  const more = h("button", { type: "button", class: "btn btn-small" }, "Show more context");
  more.addEventListener("click", async () => {
    more.disabled = true;
    try {
      const src = await ctx.source(loc.citation, 20);
      clear(box);
      box.append(codeTable(src.lines, loc.citation));
      more.remove();
    } catch (err) {
      more.disabled = false;
      ctx.announce(`Could not load the source: ${err.message}`);
    }
  });
  const chk = r.check;
  const check = chk ? h("dl", { class: "facts" },
    row("Check", `${chk.kind}${chk.exc_type ? ` raising ${chk.exc_type}` : ""}${chk.bare ? " (bare, no message)" : ""}`),
    chk.message ? row("Message", h("code", {}, chk.message)) : null,
    chk.condition ? row("Condition", h("pre", { class: "inline-pre" }, h("code", {}, dedent(chk.condition)))) : null,
    (chk.guards || []).length ? row("Guards", h("ul", { class: "plain" }, chk.guards.map((g) => h("li", {},
      h("code", {}, g.polarity === false ? `not (${g.condition})` : g.condition),
      h("span", { class: "muted" }, ` (${g.kind}, line ${g.line})`))))) : null) : null;
  const alts = (loc.alternatives || []).length ? h("p", { class: "muted" },
    `Other candidates: ${loc.alternatives.join(", ")}`) : null;
  return section("code", "Failing code", where, reported, box, more, check, alts);
}

// --------------------------------------------------------------- evaluation
function evaluationSection(r) {
  const ev = r.evaluation;
  if (!ev) return null;
  const rows = ev.atoms.map((a) => h("tr", { class: a.failing ? "failing" : "" },
    h("td", { "data-label": "Condition" }, h("code", {}, a.text)),
    h("td", { "data-label": "Role", class: "nowrap" }, a.role.replace("_", " ")),
    h("td", { "data-label": "Value", class: "nowrap" }, valueBadge(a.value)),
    h("td", { "data-label": "Inputs" }, h("ul", { class: "plain" }, a.inputs.map((i) => h("li", {},
      h("code", {}, `${i.name} = ${show(i.value)}`), " ", badge(i.source, "neutral"),
      i.detail ? h("span", { class: "muted" }, ` ${i.detail}`) : null))))));
  const table = h("table", { class: "atoms" },
    h("caption", { class: "sr-only" }, "Evaluated conditions and their values"),
    h("thead", {}, h("tr", {}, ["Condition", "Role", "Value", "Inputs"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, rows));
  const writes = Object.entries(ev.writes || {});
  return section("evaluation", "Why it fired",
    h("p", {}, "The check fires: ", valueBadge(ev.fired)),
    h("div", { class: "table-wrap" }, table),
    (ev.caveats || []).length ? h("ul", { class: "notes" }, ev.caveats.map((c) => h("li", {}, c))) : null,
    writes.length ? h("details", {}, h("summary", {}, `Earlier writes (${writes.length})`),
      h("ul", { class: "plain" }, writes.map(([attr, ws]) => h("li", {}, h("code", {}, attr), `: ${ws.join("; ")}`))))
      : null);
}

// -------------------------------------------------------------------- fixes
function editText(fix) {
  const parts = [];
  if ((fix.remove || []).length) parts.push(`remove ${fix.remove.join(" ")}`);
  const set = Object.entries(fix.set || {});
  if (set.length) parts.push(`set ${set.map(([k, v]) => `${k} ${v}`).join(" ")}`);
  return parts.join("; ") || "no change";
}

/** The fix's edit lines (`+ --flag value`, `- --flag`): `edits`, else derived from set/remove. */
function editLines(fix) {
  if ((fix.edits || []).length) return fix.edits;
  const value = (v) => (Array.isArray(v) ? v.join(" ") : String(v));
  return (fix.remove || []).map((f) => `- ${f}`).concat(Object.entries(fix.set || {})
    .map(([k, v]) => (v === true ? `+ ${k}` : `+ ${k} ${value(v)}`)));
}

function editBlock(fix) {
  const lines = editLines(fix);
  if (!lines.length) return null;
  return h("pre", { class: "edits", "aria-label": `Changes of fix ${fix.rank}` }, lines.map((l) =>
    h("span", { class: l.startsWith("+") ? "add" : l.startsWith("-") ? "del" : "" }, `${l}\n`)));
}

function sameEdit(a, b) {
  const norm = (f) => JSON.stringify([[...(f.remove || [])].sort(),
    Object.entries(f.set || {}).map(([k, v]) => [k, String(v)]).sort()]);
  return norm(a || {}) === norm(b || {});
}

function replayBadge(replay) {
  if (!replay) return null;
  const kind = { verified: "ok", next_failure: "bad", unverified: "warn", pending: "pending" }[replay.status] || "neutral";
  return h("p", { class: "replay" }, "Replay: ", badge(replay.status.replace("_", " "), kind),
    replay.detail ? h("span", { class: "muted" }, ` ${replay.detail}`) : null);
}

function ruleVerdicts(fix) {
  const rv = fix.rule_verdicts || [];
  if (!rv.length) return null;
  const count = (v) => rv.filter((x) => x.verdict === v).length;
  const order = { violated: 0, unknown: 1, satisfied: 2, not_applicable: 3 };
  const sorted = [...rv].sort((a, b) => order[a.verdict] - order[b.verdict]);
  const kind = { violated: "bad", satisfied: "ok", unknown: "unknown", not_applicable: "neutral" };
  return h("details", { class: "rules" },
    h("summary", {}, `Rule verdicts: ${count("violated")} violated, ${count("satisfied")} satisfied, `
      + `${count("unknown")} unknown, ${count("not_applicable")} not applicable`),
    h("ul", { class: "plain rule-list" }, sorted.map((v) => h("li", {},
      badge(v.verdict.replace("_", " "), kind[v.verdict]), " ", h("code", {}, v.rule),
      h("span", { class: "muted" }, ` (${v.severity})`), v.reason ? h("div", { class: "reason" }, v.reason) : null))));
}

function fixCard(record, fix, ctx, confirmed) {
  const id = `fix-${fix.rank}`;
  const isConfirmed = confirmed && sameEdit(confirmed.fix, fix);
  const trips = (fix.trips || []).length ? h("div", { class: "note warn" },
    h("strong", {}, "Would trip: "), h("ul", { class: "plain" }, fix.trips.map((t) => h("li", {},
      h("code", {}, `${t.function} (${t.path}:${t.line})`), t.message ? ` — ${t.message}` : "")))) : null;
  const confirmBtn = h("button", { type: "button", class: "btn confirm", "aria-describedby": `${id}-h`,
    disabled: Boolean(confirmed) }, isConfirmed ? "Confirmed: this fixed it" : "This fixed it");
  confirmBtn.addEventListener("click", async () => {
    confirmBtn.disabled = true;
    try {
      const note = document.getElementById("confirm-note");
      await ctx.confirm({ set: fix.set || {}, remove: fix.remove || [] }, note ? note.value : "");
    } catch (err) {
      confirmBtn.disabled = false;
      ctx.announce(`Could not record the confirmation: ${err.message}`);
    }
  });
  return h("article", { class: `fix${fix.recommended ? " recommended" : ""}${isConfirmed ? " confirmed-fix" : ""}`,
    id, "aria-labelledby": `${id}-h`, dataset: { rank: fix.rank } },
  h("h3", { id: `${id}-h` }, `Fix ${fix.rank}`, fix.recommended ? badge("recommended", "ok") : null,
    isConfirmed ? badge("confirmed", "ok") : null),
  h("p", { class: "edit" }, h("strong", {}, editText(fix)), h("span", { class: "muted" }, ` · ${fix.origin}`)),
  h("p", {}, fix.verdict, " ", h("span", { class: "muted" }, "(fixes the check: "), valueBadge(fix.fixes_check),
    h("span", { class: "muted" }, ")")),
  editBlock(fix),
  fix.gives_up ? h("p", { class: "gives-up note warn" }, h("strong", {}, "Gives up: "), fix.gives_up) : null,
  commandBlock(fix, id, ctx),
  trips, replayBadge(fix.replay), ruleVerdicts(fix),
  record.id ? h("div", { class: "actions" }, confirmBtn) : null);
}

// The fix's command to copy; when the log showed no full launch command
// (command_complete false) a note takes its place: the change is made in the user's own.
function commandBlock(fix, id, ctx) {
  if (fix.command_complete === false) {
    const note = "The log shows no full launch command: make the change above in yours";
    const set = Object.keys(fix.set || {});
    const shown = (fix.argv || []).some((t) => t.startsWith("-") && !set.includes(t.split("=")[0]));
    return h("p", { class: "command-note note warn" }, ...(shown
      ? [`${note} (the flags the log showed, changed: `, h("code", {}, fix.command), ")"]
      : [`${note}.`]));
  }
  return h("div", { class: "command" },
    h("pre", { class: "cmd", id: `${id}-cmd` }, h("code", {}, fix.command)),
    copyButton("Copy", () => fix.command, ctx.announce, { "aria-label": `Copy the command of fix ${fix.rank}` }));
}

// An upgrade as the fix (result.upgrade_fix): what to install, why, both citations,
// the replay verdict when one ran, and what was not checked. First among the fixes.
function upgradeCard(up, ctx) {
  if (!up) return null;
  return h("article", { class: "fix upgrade", id: "upgrade", "aria-label": "Upgrade" },
    h("h3", {}, badge(up.sure ? "Upgrade first" : "Upgrade may help", up.sure ? "ok" : "warn"),
      " ", h("code", {}, up.install), " ",
      copyButton("Copy", () => up.install, ctx.announce, { "aria-label": "Copy the upgrade command" })),
    h("p", {}, up.note),
    h("p", { class: "muted" }, "Cites ", ...up.citations.flatMap((c, i) => [i ? ", " : "", h("code", {}, c)])),
    replayBadge(up.replay),
    (up.not_checked || []).length ? h("ul", { class: "muted" },
      ...up.not_checked.map((n) => h("li", {}, `Not checked: ${n}`))) : null);
}

function fixesSection(record, ctx) {
  const r = record.result;
  const fixes = r.fixes || [];
  if (!fixes.length && !r.no_flag_fix && !r.upgrade_fix) return null;
  const note = record.id && fixes.length && !record.confirmation ? h("p", { class: "confirm-note" },
    h("label", { for: "confirm-note" }, "Note for “This fixed it” (optional)"),
    h("input", { id: "confirm-note", type: "text", maxlength: "500", autocomplete: "off" })) : null;
  return section("fixes", `Fixes (${fixes.length})`,
    upgradeCard(r.upgrade_fix, ctx),
    r.no_flag_fix ? h("p", { class: "note warn" }, h("strong", {}, "No flag fix: "), r.no_flag_fix) : null,
    note, ...fixes.map((f) => fixCard(record, f, ctx, record.confirmation)));
}

// ------------------------------------------------------------------- replay
function replaySection(r) {
  const rp = r.replay;
  if (!rp) return null;
  const kind = { reproduced: "ok", pending: "pending", different_failure: "warn", unverified: "warn",
    unavailable: "neutral" }[rp.status] || "neutral";
  return section("replay", "Replay",
    h("p", { id: "replay-status" }, badge(rp.status.replace("_", " "), kind),
      rp.detail ? ` ${rp.detail}` : "", rp.location ? h("code", {}, ` ${rp.location}`) : null),
    rp.status === "pending" ? h("p", { class: "muted" },
      "The crash and each fix are being replayed against the release in the background; "
      + "this page checks back for the verdicts.") : null);
}

// ---------------------------------------------------------------- unknowns
function unknownsSection(r) {
  const u = r.unknowns || [];
  return section("unknowns", "Confidence and unknowns",
    h("p", {}, `Overall confidence ${pct(r.confidence)}.`),
    u.length ? h("ul", { class: "plain unknowns" }, u.map((x) => h("li", {},
      h("strong", {}, x.what), `: ${x.why} `, h("span", { class: "muted" }, `Settle it with: ${x.settle}`))))
      : h("p", { class: "muted" }, "No open unknowns."));
}

// ----------------------------------------------------------------- similar
function similarSection(r) {
  const s = r.similar || [];
  if (!s.length) return null;
  return section("similar", "Similar past incidents",
    h("ul", { class: "plain" }, s.map((x) => h("li", {},
      x.id ? h("a", { href: `/t/${encodeURIComponent(x.id)}` }, x.summary || x.id)
        : h("span", {}, x.summary || "a confirmed incident"),
      h("span", { class: "muted" }, ` (${x.release || "?"}, confirmed ${x.confirmed_at || ""})`),
      h("div", {}, "Fixed by: ", h("code", {}, editText(x.confirmed_fix || {})), x.note ? ` — “${x.note}”` : "")))));
}

// -------------------------------------------------------------- references
function referencesSection(r, ctx) {
  const refs = r.references || [];
  if (!refs.length) return null;
  const items = refs.map((ref, i) => {
    const holder = h("div", { class: "ref-source" });
    const cit = parseCitation(ref.citation);
    const btn = cit ? h("button", { type: "button", class: "btn btn-link", "aria-expanded": "false",
      "aria-controls": `ref-src-${i}` }, ref.citation) : h("code", {}, ref.citation);
    holder.id = `ref-src-${i}`;
    if (cit) {
      btn.addEventListener("click", async () => {
        if (btn.getAttribute("aria-expanded") === "true") {
          clear(holder);
          btn.setAttribute("aria-expanded", "false");
          return;
        }
        try {
          const src = await ctx.source(ref.citation, 3);
          clear(holder);
          holder.append(codeTable(src.lines, ref.citation));
          btn.setAttribute("aria-expanded", "true");
        } catch (err) {
          ctx.announce(`Could not load ${ref.citation}: ${err.message}`);
        }
      });
    }
    return h("li", {}, badge(ref.kind, "neutral"), " ", btn, h("div", {}, h("code", { class: "ref-text" }, ref.text)),
      holder);
  });
  return section("references", `Related references (${refs.length})`,
    h("details", {}, h("summary", {}, "Declarations, help texts and writes of the flags involved"),
      h("ul", { class: "plain refs" }, items)));
}
