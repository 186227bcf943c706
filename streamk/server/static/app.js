// streamk's search page: a photo (dropped or picked), an optional box drawn on it, k, the
// second stage on or off (and a metadata filter where the server has them); results as
// thumbnails with their score, inliers and the matched region; a click searches with a result.
// Plain script: no build step, nothing fetched but this server's API.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const state = { token: sessionStorage.getItem("streamk-token") || "", query: null, box: null, health: null,
                seq: 0, urls: [] };

function setStatus(text, error) {
  $("status").textContent = text;
  $("status").classList.toggle("error", !!error);
}

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (state.token) headers.Authorization = "Bearer " + state.token;
  const resp = await fetch(path, Object.assign({}, options, { headers }));
  if (!resp.ok) {
    let message = resp.status + " " + resp.statusText;
    try {
      const body = await resp.json();
      if (body.error) message = body.error.code + ": " + body.error.message;
    } catch (e) { /* not JSON */ }
    const err = new Error(message);
    err.status = resp.status;
    throw err;
  }
  return resp;
}

// ------------------------------------------------------------------ the query
function showQuery(url, caption, drawable) {
  const img = $("query-img");
  $("drop-hint").hidden = true;
  $("query-view").hidden = false;
  $("query-view").style.cursor = drawable ? "crosshair" : "default";
  img.onload = () => {
    $("query-overlay").setAttribute("viewBox", `-0.5 -0.5 ${img.naturalWidth} ${img.naturalHeight}`);
  };
  img.src = url;
  $("query-caption").textContent = caption;
  setBox(null);
}

function setQueryFile(file) {
  if (!file) return;
  if (state.query && state.query.url) URL.revokeObjectURL(state.query.url);
  const url = URL.createObjectURL(file);
  state.query = { kind: "image", file, url };
  showQuery(url, `${file.name}: drag on the photo to search inside a box`, true);
  search();
}

function setBox(box) {
  state.box = box;
  const r = $("box-rect");
  r.hidden = !box;
  $("clear-box").hidden = !box;
  if (box) {
    r.setAttribute("x", box[0]); r.setAttribute("y", box[1]);
    r.setAttribute("width", box[2] - box[0]); r.setAttribute("height", box[3] - box[1]);
  }
}

function imagePoint(ev) {  // pointer -> pixel coordinates of the photo as stored
  const img = $("query-img");
  const rect = img.getBoundingClientRect();
  const x = (ev.clientX - rect.left) * img.naturalWidth / rect.width - 0.5;
  const y = (ev.clientY - rect.top) * img.naturalHeight / rect.height - 0.5;
  return [Math.max(0, Math.min(img.naturalWidth - 1, x)), Math.max(0, Math.min(img.naturalHeight - 1, y))];
}

function setupBoxDrawing() {
  const view = $("query-view");
  let start = null;
  view.addEventListener("pointerdown", (ev) => {
    if (!state.query || state.query.kind !== "image") return;
    ev.preventDefault();
    view.setPointerCapture(ev.pointerId);
    start = imagePoint(ev);
  });
  view.addEventListener("pointermove", (ev) => {
    if (!start) return;
    const p = imagePoint(ev);
    setBox([Math.min(start[0], p[0]), Math.min(start[1], p[1]), Math.max(start[0], p[0]), Math.max(start[1], p[1])]);
  });
  view.addEventListener("pointerup", (ev) => {
    if (!start) return;
    start = null;
    const b = state.box;
    if (b && (b[2] - b[0] < 8 || b[3] - b[1] < 8)) setBox(null);  // a click, not a box
    search();
  });
}

// ------------------------------------------------------------------ searching
function searchRequest() {
  const k = Math.max(1, Math.min(100, parseInt($("k").value, 10) || 10));
  const verify = $("verify").checked;
  const where = $("where-box").hidden ? "" : $("where").value.trim();
  const q = state.query;
  if (q.kind === "image") {
    const form = new FormData();
    form.append("image", q.file, q.file.name);
    form.append("k", String(k));
    if (!verify) { form.append("verify", "0"); form.append("expand", "0"); }
    if (state.box) form.append("box", state.box.map((v) => v.toFixed(1)).join(","));
    if (where) form.append("where", where);
    return { method: "POST", body: form };
  }
  const body = { id: q.id, k };
  if (!verify) { body.verify = 0; body.expand = 0; }
  if (where) body.where = JSON.parse(where);
  return { method: "POST", body: JSON.stringify(body), headers: { "Content-Type": "application/json" } };
}

async function search() {
  if (!state.query) return;
  const seq = ++state.seq;
  setStatus("searching…");
  $("results").setAttribute("aria-busy", "true");
  try {
    const resp = await api("/search", searchRequest());
    const body = await resp.json();
    if (seq !== state.seq) return;  // a newer search was started meanwhile
    renderResults(body);
    const verified = body.results.filter((h) => h.verified).length;
    setStatus(`${body.results.length} results, ${verified} verified, in ${Math.round(body.took_ms)} ms`);
  } catch (err) {
    if (seq !== state.seq) return;
    setStatus(err.message, true);
    if (err.status === 401) askToken();
  } finally {
    if (seq === state.seq) $("results").setAttribute("aria-busy", "false");
  }
}

// ------------------------------------------------------------------ results
async function loadThumbnail(img, id) {
  try {
    const resp = await api(`/images/${encodeURIComponent(id)}/thumbnail`);
    const url = URL.createObjectURL(await resp.blob());
    state.urls.push(url);
    img.src = url;
  } catch (err) {
    img.alt = "(no thumbnail)";
    img.classList.add("missing");
  }
}

function renderResults(body) {
  state.urls.forEach((u) => URL.revokeObjectURL(u));
  state.urls = [];
  const grid = $("results");
  grid.replaceChildren();
  body.results.forEach((hit, i) => {
    const fig = document.createElement("figure");
    fig.className = "result" + (hit.verified ? " verified" : "");
    fig.dataset.id = hit.id;
    fig.dataset.rank = String(i + 1);
    const meta = hit.metadata && Object.keys(hit.metadata).length
      ? "\n" + Object.entries(hit.metadata).map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join("\n") : "";
    fig.title = `search with ${hit.id}${meta}`;
    const thumb = document.createElement("div");
    thumb.className = "thumb";
    const img = document.createElement("img");
    img.alt = hit.id;
    thumb.appendChild(img);
    if (hit.verified && hit.region && hit.image_size) {  // where the query matched, by the verified map
      const svg = document.createElementNS(SVG, "svg");
      svg.setAttribute("viewBox", `-0.5 -0.5 ${hit.image_size[0]} ${hit.image_size[1]}`);
      svg.setAttribute("preserveAspectRatio", "xMidYMid meet");
      const poly = document.createElementNS(SVG, "polygon");
      poly.setAttribute("points", hit.region.map((p) => p.join(",")).join(" "));
      svg.appendChild(poly);
      thumb.appendChild(svg);
    }
    fig.appendChild(thumb);
    const cap = document.createElement("figcaption");
    const inliers = hit.inliers === null || hit.inliers === undefined ? ""
      : `<span class="inliers">${hit.inliers} inliers${hit.verified ? " ✓" : ""}</span>`;
    cap.innerHTML = `<span class="id"></span><span class="score">#${i + 1} · ${hit.score.toFixed(3)}</span>${inliers}`;
    cap.querySelector(".id").textContent = hit.id;
    fig.appendChild(cap);
    fig.addEventListener("click", () => searchWith(hit.id, img.src));
    grid.appendChild(fig);
    loadThumbnail(img, hit.id);
  });
}

function searchWith(id, thumbUrl) {
  if (state.query && state.query.url) URL.revokeObjectURL(state.query.url);
  state.query = { kind: "id", id };
  showQuery(thumbUrl || "", `indexed image ${id}`, false);
  search();
}

// ------------------------------------------------------------------ set-up
function askToken() {
  $("token-box").hidden = false;
  $("token").focus();
}

async function refreshStats() {
  try {
    const s = await (await api("/stats")).json();
    $("stats").textContent = `${s.images.toLocaleString()} images`;
  } catch (err) {
    $("stats").textContent = "";
  }
}

async function init() {
  setupBoxDrawing();
  const drop = $("drop");
  $("file").addEventListener("change", (ev) => setQueryFile(ev.target.files[0]));
  drop.addEventListener("dragover", (ev) => { ev.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (ev) => {
    ev.preventDefault();
    drop.classList.remove("over");
    if (ev.dataTransfer.files.length) setQueryFile(ev.dataTransfer.files[0]);
  });
  $("k").addEventListener("change", search);
  $("verify").addEventListener("change", search);
  $("where").addEventListener("change", search);
  $("clear-box").addEventListener("click", () => { setBox(null); search(); });
  $("token").value = state.token;
  $("token").addEventListener("change", () => {
    state.token = $("token").value.trim();
    sessionStorage.setItem("streamk-token", state.token);
    refreshStats();
    search();
  });
  try {
    state.health = await (await fetch("/health")).json();
    if (state.health.reads_need_token) $("token-box").hidden = false;
    if (state.health.filters) $("where-box").hidden = false;
  } catch (err) {
    setStatus("the server does not answer", true);
    return;
  }
  if (state.health.reads_need_token && !state.token) {
    setStatus("this server needs its token to search");
    askToken();
  } else {
    refreshStats();
  }
}

init();
