"""Build the course's static HTML site from the notebooks' stored outputs (nothing is executed).

Usage: python tools/build_html.py [NOTEBOOK_OR_DIR ...] [--out _site] [--instructor]

With no argument it builds every lesson (notebooks/NN_*.ipynb) and deep dive (notebooks/NNd_*.ipynb) of this
repository (tools/course.py). A directory argument means its lessons and deep dives. The site is self-contained (no
request leaves it when a page opens):

    _site/index.html             course title, then each lesson's title, summary and duration; then the deep
                                 dives, under "Going further", as optional
    _site/NN_name.html           one page per lesson: prev / next / index links, code highlighted
                                 (Pygments), figures inline, math typeset by KaTeX in the browser
    _site/NNd_name.html          one page per deep dive: back to its lesson, on to the next lesson
    _site/NN_name.ipynb          the notebook to download
    _site/assets/                course.css, course.js, pygments.css, favicon, KaTeX (from
                                 node_modules: run `npm ci` first) with its fonts
    _site/files/...              local files the lessons link to (copied from the repository)
    _site/instructor/...         with --instructor: the same pages, and guide.html, the instructor guide
                                 (docs/instructor-guide.md), linked from its index

Cells: the first markdown cell gives the index its entry (`# NN · Title`, a `> summary` blockquote, and
`**Time:** teaching N min, exercises M min.` or `**Time:** about N minutes.`); `solution`-tagged cells are shown
collapsed in <details>; `nbval-*` tags have no effect. Instructor notes are not cells: they are the guide.
See docs/CONVENTIONS.md and docs/html.md.
"""

from __future__ import annotations

import argparse
import base64
import copy
import html
import mimetypes
import re
import shutil
import sys
import textwrap
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import jinja2
import nbformat
from markupsafe import Markup
from nbconvert import HTMLExporter
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from pygments.formatters import HtmlFormatter
from traitlets.config import Config

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import course  # noqa: E402

SITE_SRC = Path(__file__).resolve().parent / "site"
COURSE_TITLE = "Writing a fast softmax in Triton"
COURSE_INTRO = (
    "A hands-on course in Jupyter notebooks: from a naive softmax in PyTorch to numerically stable, "
    "fused, online, persistent and split-row softmax kernels in Triton. Each lesson runs on a CPU "
    "(Triton's interpreter) and measures on a GPU when there is one."
)
PYGMENTS_STYLE = "default"
NOTEBOOK_GLOB_RE = r"\d\dd?_[^/]*\.ipynb"
GUIDE = REPO / "docs" / "instructor-guide.md"

SOLUTION_TAG = "solution"
NBVAL_MARKER = re.compile(r"^[ \t]*#[ \t]*NBVAL_\w+[ \t]*\n?", re.M)


class BuildError(Exception):
    """A notebook does not follow the conventions the site needs (the message says what to fix)."""


# --------------------------------------------------------------------------------------------
# Markdown helpers
# --------------------------------------------------------------------------------------------

_FENCE = re.compile(r"^([ \t]*)(`{3,}|~{3,})[^\n]*\n.*?^\1?[ \t]*\2[ \t]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
#: An escaped dollar in prose stays a literal "$" on the page: a span of its own, so that KaTeX's
#: auto-render (which pairs dollars inside one run of text) never sees it (class tex-dollar).
_LITERAL_DOLLAR = '<span class="tex-dollar">&#36;</span>'


def protect_escaped_dollars(md: str) -> str:
    r"""Replace ``\$`` outside code with a literal-dollar span (markdown would drop the backslash)."""
    if "\\$" not in md:
        return md
    out, pos = [], 0
    for m in _FENCE.finditer(md):
        out.append(_protect_inline(md[pos : m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_protect_inline(md[pos:]))
    return "".join(out)


def _protect_inline(text: str) -> str:
    out, pos = [], 0
    for m in _CODE_SPAN.finditer(text):
        out.append(text[pos : m.start()].replace("\\$", _LITERAL_DOLLAR))
        out.append(m.group(0))
        pos = m.end()
    out.append(text[pos:].replace("\\$", _LITERAL_DOLLAR))
    return "".join(out)


def md_inline(md: str) -> Markup:
    """Markdown of one paragraph (a title, a summary) as inline HTML."""
    rendered = markdown2html_mistune(protect_escaped_dollars(md.strip())).strip()
    m = re.fullmatch(r"<p>(.*)</p>", rendered, re.S)
    return Markup(m.group(1) if m else rendered)


def strip_tags(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


# --------------------------------------------------------------------------------------------
# Lessons
# --------------------------------------------------------------------------------------------

_TITLE = re.compile(r"^#[ \t]+(\d{1,3})[ \t]*(?:·|&middot;|[-–—:.])?[ \t]*(\S.*?)[ \t]*#*[ \t]*$", re.M)
_TIME = re.compile(r"\*\*Time:?\*\*:?[ \t]*(.+?)[ \t]*$", re.M)
_MINUTES = re.compile(r"(\d+(?:\.\d+)?)\s*(?:-|–|to)?\s*(?:\d+\s*)?(min|minute|minutes|h|hr|hrs|hour|hours)\b", re.I)


@dataclass
class Lesson:
    path: Path
    stem: str
    number: str
    title_md: str
    summary_md: str
    time: str
    minutes: float | None
    nb: nbformat.NotebookNode = field(repr=False)
    deep: bool = False  # a deep dive (NNd_name.ipynb), optional: it follows lesson NN

    @property
    def html(self) -> str:
        return f"{self.stem}.html"

    @property
    def ipynb(self) -> str:
        return f"{self.stem}.ipynb"

    @property
    def title_html(self) -> Markup:
        return md_inline(self.title_md)

    @property
    def title_text(self) -> str:
        return strip_tags(str(self.title_html))

    @property
    def summary_html(self) -> Markup:
        return md_inline(self.summary_md)

    @property
    def label(self) -> str:
        return f"{self.number} · {self.title_text}"


def read_lesson(path: Path) -> Lesson:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:  # tidied notebooks may drop outputs' empty metadata, which nbformat requires
        for out in cell.get("outputs", []):
            if out.get("output_type") in ("display_data", "execute_result"):
                out.setdefault("metadata", nbformat.NotebookNode())
    first = next((c for c in nb.cells if c.cell_type == "markdown"), None)
    if first is None or nb.cells.index(first) != 0:
        raise BuildError(f"{path}: the first cell must be the markdown introduction (docs/CONVENTIONS.md)")
    src = first.source
    title = _TITLE.search(src)
    if not title:
        raise BuildError(f"{path}: the first cell needs a title line '# NN · Title' (docs/CONVENTIONS.md)")
    quote_lines = []
    for line in src[title.end() :].splitlines():
        if line.lstrip().startswith(">"):
            quote_lines.append(re.sub(r"^\s*>\s?", "", line))
        elif quote_lines and line.strip() == "":
            break
        elif quote_lines:
            break
    summary = " ".join(s.strip() for s in quote_lines).strip()
    if not summary:
        raise BuildError(f"{path}: the first cell needs a one- or two-sentence '> summary' blockquote after the title")
    tm = _TIME.search(src)
    if not tm:
        raise BuildError(f"{path}: the first cell needs a '**Time:** about N minutes.' line")
    time_text = tm.group(1).rstrip(".").strip()
    mm = _MINUTES.search(time_text)
    minutes = None
    if re.search(r"(?i)teach", time_text) and re.search(r"(?i)exercis", time_text):  # teaching + exercises
        minutes = sum(float(m) for m in re.findall(r"(\d+(?:\.\d+)?)\s*min", time_text))
    elif mm:
        minutes = float(mm.group(1)) * (60 if mm.group(2).lower().startswith("h") else 1)
    number = title.group(1).zfill(2)
    stem_number = re.match(r"(\d+)d?_", path.name)
    if stem_number and stem_number.group(1).zfill(2) != number:
        print(f"warning: {path.name}: the title's number {number} differs from the file name's", file=sys.stderr)
    return Lesson(
        path=path,
        stem=path.stem,
        number=number,
        title_md=title.group(2),
        summary_md=summary,
        time=time_text,
        minutes=minutes,
        nb=nb,
        deep=course.is_deep_dive(path),
    )


def find_notebooks(args: list[str]) -> list[Path]:
    paths: list[Path] = []
    for a in args or [str(REPO / "notebooks")]:
        p = Path(a)
        if p.is_dir():
            paths.extend(sorted(p.glob(course.CORE_GLOB)) + sorted(p.glob(course.DEEP_GLOB)))
        elif p.is_file() and p.suffix == ".ipynb":
            paths.append(p)
        else:
            raise BuildError(f"{a}: not a notebook or a directory of notebooks")
    seen: dict[str, Path] = {}
    for p in paths:
        if p.stem in seen and seen[p.stem].resolve() != p.resolve():
            raise BuildError(f"two notebooks named {p.stem}: {seen[p.stem]} and {p}")
        seen[p.stem] = p
    return sorted(seen.values(), key=lambda p: (p.name[:2], course.is_deep_dive(p), p.name))


def total_time(lessons: list[Lesson]) -> str:
    if not lessons or any(lesson.minutes is None for lesson in lessons):
        return ""
    m = int(round(sum(lesson.minutes for lesson in lessons)))
    h, m = divmod(m, 60)
    if not h:
        return f"about {m} minutes"
    hours = f"{h} hour{'s' if h > 1 else ''}"
    return f"about {hours}" + (f" {m} minutes" if m else "")


# --------------------------------------------------------------------------------------------
# Cells
# --------------------------------------------------------------------------------------------

_DETAILS = re.compile(r"<details\b[^>]*>(?P<inner>.*)</details\s*>", re.S | re.I)
_SUMMARY = re.compile(r"^\s*<summary\b[^>]*>(?P<summary>.*?)</summary\s*>", re.S | re.I)


def split_solution(src: str) -> dict:
    """The parts of a solution cell: text before, the <details> summary and body, text after."""
    m = _DETAILS.search(src)
    if not m:
        return {"before": "", "summary": "Show a solution", "body": src, "after": ""}
    inner = m.group("inner")
    s = _SUMMARY.match(inner)
    summary = s.group("summary").strip() if s else "Show a solution"
    body = inner[s.end() :] if s else inner
    return {
        "before": src[: m.start()].strip(),
        "summary": summary or "Show a solution",
        "body": textwrap.dedent(body).strip("\n"),
        "after": src[m.end() :].strip(),
    }


def prepare_notebook(nb: nbformat.NotebookNode, edition: str) -> nbformat.NotebookNode:
    """A copy of the notebook as the site shows it in one edition ('learner' or 'instructor')."""
    nb = copy.deepcopy(nb)
    cells = []
    for cell in nb.cells:
        tags = set(cell.metadata.get("tags", []))
        if cell.cell_type == "code":
            cell.source = NBVAL_MARKER.sub("", cell.source)
            if not cell.source.strip() and not cell.get("outputs"):
                continue
        elif cell.cell_type == "markdown":
            if SOLUTION_TAG in tags:
                parts = split_solution(cell.source)
                cell.source = protect_escaped_dollars(parts.pop("body"))
                parts["before"] = protect_escaped_dollars(parts["before"])
                parts["after"] = protect_escaped_dollars(parts["after"])
                cell.metadata["site_solution"] = parts
            else:
                cell.source = protect_escaped_dollars(cell.source)
        cells.append(cell)
    nb.cells = cells
    return nb


def make_exporter() -> HTMLExporter:
    c = Config()
    c.HTMLExporter.extra_template_basedirs = [str(SITE_SRC / "nbconvert")]
    c.HTMLExporter.template_name = "course"
    c.HTMLExporter.exclude_input_prompt = True
    c.HTMLExporter.exclude_output_prompt = True
    # Not embed_images: it re-parses each inline HTML tag alone (so <span>x</span> loses its text);
    # rewrite_urls inlines the images that markdown links by path instead.
    c.HTMLExporter.anchor_link_text = "#"
    return HTMLExporter(config=c)


# --------------------------------------------------------------------------------------------
# After nbconvert: local links and images, sections, math count
# --------------------------------------------------------------------------------------------

_ATTR = re.compile(r"""(?P<pre>\s(?P<name>href|src)=)(?P<q>["'])(?P<val>.*?)(?P=q)""", re.I | re.S)
_H2 = re.compile(r'<h2 id="(?P<id>[^"]+)">(?P<text>.*?)</h2>', re.S)


@dataclass
class PageContext:
    nb_dir: Path
    root: Path
    out: Path
    lesson_stems: set[str]
    files_prefix: str  # "files/" or "../files/"
    copied: dict[str, Path]
    warnings: list[str]


def is_relative_url(url: str) -> bool:
    parts = urlsplit(url)
    return not (parts.scheme or parts.netloc or url.startswith(("#", "/", "data:", "mailto:")))


def rewrite_urls(body: str, ctx: PageContext, where: str) -> str:
    def repl(m: re.Match) -> str:
        name, val = m.group("name").lower(), html.unescape(m.group("val"))
        if not is_relative_url(val) or not val.strip():
            return m.group(0)
        parts = urlsplit(val)
        frag = f"#{parts.fragment}" if parts.fragment else ""
        target = unquote(parts.path)
        if (
            name == "href"
            and target.endswith(".ipynb")
            and (Path(target).stem in ctx.lesson_stems or re.fullmatch(NOTEBOOK_GLOB_RE, Path(target).name))
        ):
            if Path(target).stem not in ctx.lesson_stems:
                ctx.warnings.append(f"{where}: link to lesson {target!r}, which is not in this build")
            new = f"{Path(target).stem}.html{frag}"
        else:
            src = (ctx.nb_dir / target).resolve()
            if not src.is_file():
                ctx.warnings.append(f"{where}: {name}={val!r} points to no file; left as is")
                return m.group(0)
            if name == "src":
                mime = mimetypes.guess_type(src.name)[0] or "application/octet-stream"
                new = f"data:{mime};base64,{base64.b64encode(src.read_bytes()).decode()}"
            else:
                try:
                    rel = src.relative_to(ctx.root)
                except ValueError:
                    ctx.warnings.append(f"{where}: link {val!r} leaves the repository; left as is")
                    return m.group(0)
                ctx.copied[rel.as_posix()] = src
                new = ctx.files_prefix + quote(rel.as_posix()) + frag
        return f"{m.group('pre')}{m.group('q')}{html.escape(new, quote=True)}{m.group('q')}"

    return _ATTR.sub(repl, body)


def sections(body: str) -> list[dict]:
    out = []
    for m in _H2.finditer(body):
        text = re.sub(r'<a class="anchor-link".*?</a>', "", m.group("text"), flags=re.S)
        out.append({"id": html.unescape(m.group("id")), "text": strip_tags(text)})
    return out


_MATH = re.compile(
    r"\$\$.+?\$\$|\\\[.+?\\\]|\\begin\{(equation|align|alignat|gather|CD)(\*?)\}.+?\\end\{\1\2\}|\\\(.+?\\\)|\$[^$]+?\$",
    re.S,
)


class _MathCounter(HTMLParser):
    """Counts the math that KaTeX's auto-render will typeset (text outside pre/code/script...)."""

    IGNORED = {"script", "noscript", "style", "textarea", "pre", "code", "option"}
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[bool] = []  # per open element: inside an ignored element?
        self.count = 0
        self.text: list[str] = []

    def _flush(self):
        if self.text:
            self.count += len(_MATH.findall("".join(self.text)))
            self.text = []

    def ignored(self) -> bool:
        return bool(self.stack and self.stack[-1])

    def handle_starttag(self, tag, attrs):
        self._flush()
        if tag in self.VOID:
            return
        cls = dict(attrs).get("class") or ""
        self.stack.append(self.ignored() or tag in self.IGNORED or "tex-dollar" in cls.split())

    def handle_endtag(self, tag):
        self._flush()
        if tag not in self.VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if not self.ignored():
            self.text.append(data)

    def close(self):
        super().close()
        self._flush()


def count_math(fragment: str) -> int:
    p = _MathCounter()
    p.feed(fragment)
    p.close()
    return p.count


# --------------------------------------------------------------------------------------------
# The site
# --------------------------------------------------------------------------------------------


def find_katex(explicit: str | None) -> Path:
    cands = [Path(explicit)] if explicit else [REPO / "node_modules" / "katex" / "dist"]
    for c in cands:
        if (c / "katex.min.js").is_file() and (c / "contrib" / "auto-render.min.js").is_file():
            return c
    raise BuildError(f"KaTeX not found in {cands[0]}: run `npm ci` in {REPO} (package-lock.json pins it)")


def copy_assets(out: Path, katex: Path) -> None:
    assets = out / "assets"
    (assets / "katex" / "contrib").mkdir(parents=True, exist_ok=True)
    for name in ("katex.min.css", "katex.min.js"):
        shutil.copy2(katex / name, assets / "katex" / name)
    shutil.copy2(katex / "contrib" / "auto-render.min.js", assets / "katex" / "contrib" / "auto-render.min.js")
    shutil.copytree(katex / "fonts", assets / "katex" / "fonts", dirs_exist_ok=True)
    for f in (SITE_SRC / "static").iterdir():
        if f.is_file():
            shutil.copy2(f, assets / f.name)
    css = HtmlFormatter(style=PYGMENTS_STYLE).get_style_defs(".highlight")
    (assets / "pygments.css").write_text(f"/* Pygments '{PYGMENTS_STYLE}' style for highlighted code */\n{css}\n")


def build_edition(
    lessons: list[Lesson],
    out: Path,
    edition: str,
    args,
    env: jinja2.Environment,
    exporter: HTMLExporter,
    copied: dict[str, Path],
    warnings: list[str],
) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    assets = "assets/" if edition == "learner" else "../assets/"
    files_prefix = "files/" if edition == "learner" else "../files/"
    stems = {lesson.stem for lesson in lessons}
    core = [lesson for lesson in lessons if not lesson.deep]
    deep = [lesson for lesson in lessons if lesson.deep]
    common = {
        "course_title": args.title,
        "edition": edition,
        "assets": assets,
        "lessons": core,
        "deep_dives": deep,
        "guide": edition == "instructor" and GUIDE.exists(),
    }
    pages = []
    for lesson in lessons:
        if lesson.deep:  # back to its lesson, on to the next one
            own = next((c for c in core if c.number == lesson.number), None)
            later = [c for c in core if c.number > lesson.number]
            prev, nxt = own, (later[0] if later else None)
        else:
            i = core.index(lesson)
            prev, nxt = (core[i - 1] if i > 0 else None), (core[i + 1] if i + 1 < len(core) else None)
        nb = prepare_notebook(lesson.nb, edition)
        resources = {"metadata": {"path": str(lesson.path.parent), "name": lesson.stem}}
        body, _ = exporter.from_notebook_node(nb, resources=resources)
        ctx = PageContext(
            nb_dir=lesson.path.parent.resolve(),
            root=args.root,
            out=out,
            lesson_stems=stems,
            files_prefix=files_prefix,
            copied=copied,
            warnings=warnings,
        )
        body = rewrite_urls(body, ctx, f"{lesson.path.name}")
        page = env.get_template("lesson.html.j2").render(
            **common,
            page_title=f"{lesson.label} · {args.title}",
            description=strip_tags(str(lesson.summary_html)),
            body_class=f"lesson edition-{edition}",
            math_count=count_math(body),
            lesson=lesson,
            prev=prev,
            next=nxt,
            sections=sections(body),
            body=Markup(body),
        )
        (out / lesson.html).write_text(page, encoding="utf-8")
        shutil.copy2(lesson.path, out / lesson.ipynb)
        pages.append(out / lesson.html)
    index = env.get_template("index.html.j2").render(
        **common,
        page_title=args.title + (" · instructor edition" if edition == "instructor" else ""),
        description=args.intro,
        body_class=f"index edition-{edition}",
        math_count=sum(count_math(str(lesson.summary_html)) for lesson in lessons),
        intro=args.intro,
        total_time=total_time(core),
        workshop=Markup(markdown2html_mistune(course.workshop_plan(args.root))) if core else "",
    )
    (out / "index.html").write_text(index, encoding="utf-8")
    pages.append(out / "index.html")
    if common["guide"]:
        body = markdown2html_mistune(GUIDE.read_text(encoding="utf-8"))
        ctx = PageContext(
            nb_dir=GUIDE.parent.resolve(),
            root=args.root,
            out=out,
            lesson_stems=stems,
            files_prefix=files_prefix,
            copied=copied,
            warnings=warnings,
        )
        page = env.get_template("guide.html.j2").render(
            **common,
            page_title=f"Instructor guide · {args.title}",
            description="Notes for instructors, lesson by lesson",
            body_class=f"guide edition-{edition}",
            math_count=count_math(body),
            sections=sections(body),
            body=Markup(rewrite_urls(body, ctx, GUIDE.name)),
        )
        (out / "guide.html").write_text(page, encoding="utf-8")
        pages.append(out / "guide.html")
    return pages


def build(args) -> int:
    t0 = time.time()
    paths = find_notebooks(args.notebooks)
    if not paths:
        raise BuildError(f"no notebooks ({course.CORE_GLOB}, {course.DEEP_GLOB}) in {args.notebooks or ['notebooks']}")
    if args.root is None:
        args.root = paths[0].resolve().parent.parent
    args.root = Path(args.root).resolve()
    katex = find_katex(args.katex)
    lessons = [read_lesson(p) for p in paths]

    out = Path(args.out)
    if out.exists():
        if out.resolve() in (REPO, args.root, Path.home().resolve(), Path("/")):
            raise BuildError(f"refusing to clear {out}: give --out a build folder such as _site")
        shutil.rmtree(out)
    out.mkdir(parents=True)

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(SITE_SRC / "pages"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    exporter = make_exporter()
    copied: dict[str, Path] = {}
    warnings: list[str] = []
    pages = build_edition(lessons, out, "learner", args, env, exporter, copied, warnings)
    if args.instructor:
        pages += build_edition(lessons, out / "instructor", "instructor", args, env, exporter, copied, warnings)
    for rel, src in sorted(copied.items()):
        dest = out / "files" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)
    copy_assets(out, katex)
    (out / ".nojekyll").write_text("")  # GitHub Pages: serve the folder as it is

    for w in dict.fromkeys(warnings):
        print(f"warning: {w}", file=sys.stderr)
    editions = "learner + instructor editions" if args.instructor else "learner edition"
    print(
        f"built {out}/ ({editions}): {sum(not x.deep for x in lessons)} lessons and {sum(x.deep for x in lessons)} "
        f"deep dives, {len(pages)} pages, "
        f"{len(copied)} linked files, in {time.time() - t0:.1f} s"
    )
    for lesson in lessons:
        print(f"  {lesson.html:32s} {lesson.label} ({lesson.time})")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", help="notebooks or directories (default: notebooks/)")
    ap.add_argument("--out", default=str(REPO / "_site"), help="output folder, cleared first (default: _site)")
    ap.add_argument("--instructor", action="store_true", help="also build the instructor edition in OUT/instructor/")
    ap.add_argument("--title", default=COURSE_TITLE, help="the course title")
    ap.add_argument("--intro", default=COURSE_INTRO, help="the index page's introduction")
    ap.add_argument(
        "--root", default=None, help="folder whose files lessons may link to (default: the notebooks' parent)"
    )
    ap.add_argument("--katex", default=None, help="KaTeX's dist folder (default: node_modules/katex/dist)")
    args = ap.parse_args(argv)
    try:
        return build(args)
    except BuildError as e:
        print(f"build_html: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
