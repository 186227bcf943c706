"""The demo's report: ``index.html``, one self-contained page (CSS inline, no script).

From the top: the contents (links to each part); the **summary**: mAP per method,
overall, per query category and per change, the time per query and the number of
queries missed; the **failures**: the queries that some method misses (a negative
among its first min(#positives, show) results, junk skipped), those where the
methods disagree marked, each linked to its block; then every query, by category,
with its first results per method. A checkbox hides the queries no method misses
(plain CSS: ``:checked ~``). Thumbnails are JPEG files beside the page (relative
links). The page names no file by its path on this machine: images by their ids,
the sources in words.
"""

import html

import numpy as np

from . import transforms as tf

THUMB_SIDE = 160

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:80em}
h1{font-size:1.4em} h2{font-size:1.2em;margin-top:1.6em} h3{font-size:1.05em} p.info{max-width:60em}
nav ol{margin:.3em 0}
table.map,table.failures{border-collapse:collapse;margin:1em 0}
table.map th,table.map td,table.failures th,table.failures td{padding:.25em .7em;text-align:right;
  border-bottom:1px solid #ddd}
table.map th:first-child,table.map td:first-child,table.failures .name{text-align:left}
table.map td.best{font-weight:bold}
td.miss{color:#b00} td.hit{color:#161}
.toggle{display:block;margin:1.2em 0;padding:.5em;background:#f3f3f3;font-weight:bold}
#failures-only:checked ~ main .q.ok{display:none}
.q{display:flex;gap:1.2em;border-top:1px solid #ccc;padding:.8em 0;align-items:flex-start}
.q table th{text-align:left;font-weight:normal;font-size:13px;width:7.5em;vertical-align:top}
.q tr.missed th{color:#b00;font-weight:bold}
.hits{display:flex;gap:.4em}
figure{margin:0;width:132px;font-size:11px;overflow-wrap:anywhere}
figure img{display:block;max-width:120px;max-height:120px;border:5px solid #999}
figure.query img{border-color:#48c}
figure.pos img{border-color:#2a2} figure.neg img{border-color:#d22} figure.junk img{border-color:#bbb}
a.top{font-size:12px}
"""

_e = html.escape


def _thumbnail(src, dst):
    img = tf.open_rgb(src, max_side=THUMB_SIDE)
    img.save(dst, format="JPEG", quality=85)


def _figure(cls, thumb, caption_lines):
    cap = "<br>".join(_e(str(line)) for line in caption_lines)
    return (f'<figure class="{cls}"><img src="{_e(thumb)}" alt="{_e(str(caption_lines[-1]))}">'
            f"<figcaption>{cap}</figcaption></figure>")


def _anchor(qi):
    return f"q-{qi + 1:04d}"


def _category_anchor(category):
    return "queries-" + "-".join(category.split())


def _summary(result, queries):
    """The mAP table: one row per method; the best value of each column in bold."""
    categories = list(dict.fromkeys(q.category for q in queries))
    columns = [("all", [m.map for m in result.methods])]
    if len(categories) > 1:
        columns += [(c, [m.per_category[c] for m in result.methods]) for c in categories]
    columns += [(t, [m.per_transform[t] for m in result.methods]) for t in result.transforms]
    head = "".join(f"<th>{_e(name)}</th>" for name, _ in columns)
    counts = {c: sum(q.category == c for q in queries) for c in categories}
    parts = ['<section id="summary"><h2>Summary</h2>',
             "<p>mAP (%, official AP) of each aggregation method: over all queries"
             + (", per category (" + ", ".join(f"{_e(c)}: {n} queries" for c, n in counts.items()) + ")"
                if len(categories) > 1 else "")
             + " and per change of the query image; <em>missed</em>: queries with a negative among the first "
               "results (see <a href=\"#failures\">failures</a>).</p>",
             f'<table class="map"><tr><th>method</th>{head}<th>ms/query</th><th>missed</th></tr>']
    for i, m in enumerate(result.methods):
        cells = "".join(f'<td class="best">{v[i]:.1f}</td>' if v[i] == max(v) else f"<td>{v[i]:.1f}</td>"
                        for _, v in columns)
        parts.append(f"<tr><td>{_e(m.method)}</td>{cells}<td>{m.ms_per_query:.0f}</td>"
                     f"<td>{int(m.missed.sum())}</td></tr>")
    parts.append("</table>")
    parts.append("<p>ms/query: the query's encoding (its local features embedded once, with one Gram matrix, "
                 "for the three methods) and the method's scan; the features themselves are extracted once "
                 "beforehand. Bold: the best of each column.</p></section>")
    return parts


def _missed_by(result):
    """(the queries where the methods disagree, those every method misses): indices."""
    missed = np.array([m.missed for m in result.methods])  # methods x queries
    return np.flatnonzero(missed.any(axis=0) & ~missed.all(axis=0)), np.flatnonzero(missed.all(axis=0))


def _failures(result, queries, disagree, all_miss):
    """The queries some method misses: first those where the methods disagree (what the
    aggregation changes), then those every method misses; each row links to the query."""
    parts = ['<section id="failures"><h2>Failures</h2>',
             (f"<p>{len(disagree) + len(all_miss)} of {len(queries)} queries are missed by at least one "
              "method: a negative among its first results, before all of the query's positives. AP per "
              'method, <span class="miss">missed</span> in red. Each query links to its results.</p>')]
    for anchor, title, rows in (("disagree", "The methods disagree", disagree),
                                ("all-miss", "Every method misses", all_miss)):
        parts.append(f'<h3 id="{anchor}">{title}: {len(rows)} queries</h3>')
        if len(rows):
            parts += _failure_table(result, queries, rows)
    parts.append("</section>")
    return parts


def _failure_table(result, queries, rows):
    head = "".join(f"<th>{_e(m.method)}</th>" for m in result.methods)
    parts = [f'<table class="failures"><tr><th class="name">query</th><th>category</th><th>change</th>{head}</tr>']
    for qi in rows:
        q = queries[qi]
        cells = "".join(f'<td class="{"miss" if m.missed[qi] else "hit"}">{_ap(m.aps[qi])}</td>'
                        for m in result.methods)
        parts.append(f'<tr><td class="name"><a href="#{_anchor(qi)}">{_e(q.source)}</a></td>'
                     f"<td>{_e(q.category)}</td><td>{_e(q.transform)}</td>{cells}</tr>")
    parts.append("</table>")
    return parts


def _ap(value):
    return "n/a" if np.isnan(value) else f"{value:.1f}"


def _contents(queries, disagree, all_miss):
    n_disagree, n_all = len(disagree), len(all_miss)

    def link(anchor, text):
        return f'<a href="#{anchor}">{_e(text)}</a>'

    items = [link("summary", "Summary"),
             link("failures", f"Failures ({n_disagree + n_all} queries)")
             + f'<ul><li>{link("disagree", f"the methods disagree ({n_disagree})")}</li>'
               f'<li>{link("all-miss", f"every method misses ({n_all})")}</li></ul>']
    for c in dict.fromkeys(q.category for q in queries):
        items.append(link(_category_anchor(c), f"Queries: {c} ({sum(q.category == c for q in queries)})"))
    items.append(link("reading", "How to read a query"))
    return ['<nav id="contents"><h2>Contents</h2><ol>' + "".join(f"<li>{i}</li>" for i in items) + "</ol></nav>"]


def write_page(out, result, database, queries, positives, junk, info_lines, show=5):
    """index.html under ``out`` and the thumbnails it links (only those it shows)."""
    thumbs = {}

    def thumb(kind, i, path):
        if (kind, i) not in thumbs:
            rel = f"thumbs/{kind}{i:05d}.jpg"
            _thumbnail(path, out / rel)
            thumbs[(kind, i)] = rel
        return thumbs[(kind, i)]

    parts = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
             "<title>streamk demo</title>", f"<style>{_CSS}</style></head><body>",
             "<h1>streamk demo: sum, democratic and GMP aggregation</h1>"]
    parts += [f'<p class="info">{_e(line)}</p>' for line in info_lines]
    disagree, all_miss = _missed_by(result)
    parts += (_contents(queries, disagree, all_miss) + _summary(result, queries)
              + _failures(result, queries, disagree, all_miss))
    parts.append('<section id="reading"><h2>How to read a query</h2>'
                 f"<p>Each query (blue border) with its top {show} results per method: rank, score (cosine), "
                 "id. Border of a result: green, same scene; red, another scene; grey, junk (shares only the "
                 "object: a bursty scene and the photo its object was cut from; or, in your folder, a copy of the "
                 "query's source image), not counted. A method's name "
                 "in red: it missed the query.</p></section>")
    parts.append('<input type="checkbox" id="failures-only">'
                 '<label class="toggle" for="failures-only"> show only the queries a method misses</label>')
    parts.append("<main>")
    for category in dict.fromkeys(q.category for q in queries):
        parts.append(f'<section id="{_category_anchor(category)}" class="category"><h2>Queries: {_e(category)}</h2>')
        for qi, q in enumerate(queries):
            if q.category == category:
                parts += _query_block(qi, q, result, database, positives[q.scene], junk[q.scene], thumb, show)
        parts.append("</section>")
    parts.append("</main></body></html>")
    page = out / "index.html"
    page.write_text("\n".join(parts), encoding="utf-8")
    return page


def _query_block(qi, q, result, database, positives, junk, thumb, show):
    pos, junk = set(positives.tolist()), set(junk.tolist())
    failing = any(m.missed[qi] for m in result.methods)
    parts = [f'<div class="q {"fail" if failing else "ok"}" id="{_anchor(qi)}">',
             _figure("query", thumb("q", qi, q.path), ["query", q.transform, q.source]), "<table>"]
    for m in result.methods:
        figs = []
        for rank, (row, score) in enumerate(m.rankings[qi][:show], 1):
            cls = "pos" if row in pos else "junk" if row in junk else "neg"
            figs.append(_figure(cls, thumb("d", row, database[row].path), [f"#{rank} {score:.3f}", database[row].id]))
        parts.append(f'<tr class="{"missed" if m.missed[qi] else "found"}"><th>{_e(m.method)}<br>'
                     f"AP {_e(_ap(m.aps[qi]))}{'<br>missed' if m.missed[qi] else ''}</th>"
                     f'<td><div class="hits">{"".join(figs) or _e("(no result)")}</div></td></tr>')
    parts.append('</table><a class="top" href="#contents">contents</a></div>')
    return parts


__all__ = ["THUMB_SIDE", "write_page"]
