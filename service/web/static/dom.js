// Small DOM helpers shared by the page: element building (text only, never
// innerHTML, so nothing from a log or the KB is ever parsed as HTML), the
// copy-to-clipboard helper with its textarea fallback, and formatting.

/**
 * Build an element. `attrs` keys: `class`, `text`, `on<event>` (listener),
 * `dataset` (object), booleans (set when true) and anything else as attributes.
 * Children may be strings (text nodes), nodes, arrays, or null/false (skipped).
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = String(value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (value === true) el.setAttribute(key, "");
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

/** Remove every child of `el`. */
export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
}

/** A value as the page shows it: JSON for objects, "unknown" kept as is. */
export function show(value) {
  if (value === null) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "string") return value === "unknown" ? "unknown" : JSON.stringify(value);
  return JSON.stringify(value);
}

/** `0.75` -> `"75%"`. */
export function pct(value) {
  return typeof value === "number" ? `${Math.round(value * 100)}%` : "?";
}

/**
 * Copy `text` to the clipboard: the async Clipboard API when the page may use
 * it, else a hidden textarea and `document.execCommand("copy")`. Resolves to
 * true when either worked. The last copied text is also kept on
 * `document.documentElement.dataset.lastCopied` (a test hook).
 */
export async function copyText(text) {
  document.documentElement.dataset.lastCopied = text;
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch (_err) {
      // fall through to the textarea fallback (permission denied, no focus, ...)
    }
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.top = "-1000px";
  area.style.opacity = "0";
  const active = document.activeElement;
  document.body.appendChild(area);
  area.select();
  let ok = false;
  try {
    ok = document.execCommand("copy");
  } catch (_err) {
    ok = false;
  }
  area.remove();
  if (active && typeof active.focus === "function") active.focus();
  return ok;
}

/**
 * A "Copy" button for `getText()`; its label turns into "Copied" (or
 * "Copy failed") for a moment, and the change is announced via `announce`.
 */
export function copyButton(label, getText, announce, extra = {}) {
  const btn = h("button", { type: "button", class: "btn btn-small copy", ...extra }, label);
  btn.addEventListener("click", async () => {
    const ok = await copyText(getText());
    btn.textContent = ok ? "Copied" : "Copy failed";
    btn.dataset.state = ok ? "copied" : "failed";
    if (announce) announce(ok ? "Copied to the clipboard" : "Could not copy: select the text instead");
    setTimeout(() => {
      btn.textContent = label;
      delete btn.dataset.state;
    }, 2000);
  });
  return btn;
}

/** Split `release:path:line[-end]` into its parts (paths may not hold ':'). */
export function parseCitation(ref) {
  const m = /^([^:]+):(.+):(\d+)(?:-(\d+))?$/.exec(ref || "");
  if (!m) return null;
  return { release: m[1], path: m[2], start: Number(m[3]), end: m[4] ? Number(m[4]) : Number(m[3]) };
}

/**
 * Cut the common indentation of a code snippet. The first line is left out of
 * the measure: a condition cut out of the source starts mid-line (`(`).
 */
export function dedent(text) {
  const lines = String(text).split("\n");
  const indents = lines.slice(1).filter((l) => l.trim()).map((l) => l.match(/^\s*/)[0].length);
  const cut = indents.length ? Math.min(...indents) : 0;
  return [lines[0], ...lines.slice(1).map((l) => l.slice(Math.min(cut, l.match(/^\s*/)[0].length)))]
    .join("\n").trim();
}

/**
 * A tiny, safe subset of markdown for the explanation: fenced code blocks,
 * `- ` lists, `inline code` and **bold**; everything else is text. Returns nodes.
 */
export function miniMarkdown(text) {
  const out = [];
  const blocks = String(text || "").split(/```[a-z]*\n?/);
  blocks.forEach((block, i) => {
    if (i % 2 === 1) {
      out.push(h("pre", { class: "code-block" }, h("code", {}, dedent(block.replace(/\n$/, "")))));
      return;
    }
    let para = [];
    let list = null;
    const flushPara = () => {
      if (para.length) out.push(h("p", {}, inline(para.join(" "))));
      para = [];
    };
    for (const line of block.split("\n")) {
      if (/^\s*[-*] /.test(line)) {
        flushPara();
        if (!list) {
          list = h("ul", {});
          out.push(list);
        }
        list.append(h("li", {}, inline(line.replace(/^\s*[-*] /, ""))));
      } else if (!line.trim()) {
        flushPara();
        list = null;
      } else {
        list = null;
        para.push(line);
      }
    }
    flushPara();
  });
  return out;
}

/** `inline code` and **bold** in one line of text, as nodes (everything else is text). */
export function inline(text) {
  const parts = [];
  const re = /(`[^`]+`|\*\*[^*]+\*\*)/g;
  let last = 0;
  let m;
  while ((m = re.exec(text)) !== null) {
    if (m.index > last) parts.push(text.slice(last, m.index));
    const tok = m[0];
    parts.push(tok.startsWith("`") ? h("code", {}, tok.slice(1, -1)) : h("strong", {}, tok.slice(2, -2)));
    last = m.index + tok.length;
  }
  if (last < text.length) parts.push(text.slice(last));
  return parts;
}
