// Browser test of the built course site (`make test-browser`; see docs/html.md).
//
// Serves SITE_DIR (default _site) on a free 127.0.0.1 port, opens every page in headless Chromium
// (Debian's /usr/bin/chromium, driven by playwright-core; CHROMIUM overrides the path) and checks:
// no failed request, no request to another host, no console error, every image loaded, math
// typeset by KaTeX (and no raw $…$ left outside code), prev / next / index links reach the right
// pages, the notebook download works, and solutions stay hidden until their summary is clicked. The deep
// dives (NNd_*.html) are listed under "Going further" and lead back to their lesson. Pages of the instructor
// edition (SITE_DIR/instructor) are checked the same way when it was built, with its guide (guide.html), which
// the learner edition does not link. SCREENSHOTS=DIR saves a full-page PNG of each page.
//
// Run: node --test tests/browser/test_site.mjs   (node's test runner prints the pass/fail summary)

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { mkdtemp, readdir, readFile, rm, stat, mkdir } from "node:fs/promises";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { LOCAL_HOSTS, launchOffline } from "./offline_chromium.mjs";

const SITE = path.resolve(process.env.SITE_DIR || "_site");
const SCREENSHOTS = process.env.SCREENSHOTS || "";
const TIMEOUT = 30_000;

const TYPES = {
  ".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
  ".js": "text/javascript; charset=utf-8", ".mjs": "text/javascript; charset=utf-8",
  ".json": "application/json", ".ipynb": "application/x-ipynb+json", ".svg": "image/svg+xml",
  ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
  ".woff2": "font/woff2", ".woff": "font/woff", ".ttf": "font/ttf", ".txt": "text/plain; charset=utf-8",
  ".py": "text/plain; charset=utf-8", ".csv": "text/plain; charset=utf-8", ".md": "text/plain; charset=utf-8",
};

// ---- what was built: the lesson pages in file-name order, per edition ------------------------
async function lessonFiles(dir, re = /^\d\d_.*\.html$/) {
  if (!existsSync(dir)) return [];
  return (await readdir(dir)).filter((f) => re.test(f)).sort();
}
const DEEP = /^\d\dd_.*\.html$/;
if (!existsSync(path.join(SITE, "index.html"))) {
  throw new Error(`${SITE}/index.html not found: build the site first (make html)`);
}
const EDITIONS = [{ name: "learner", prefix: "", lessons: await lessonFiles(SITE), deep: await lessonFiles(SITE, DEEP) }];
if (existsSync(path.join(SITE, "instructor", "index.html"))) {
  const dir = path.join(SITE, "instructor");
  EDITIONS.push({ name: "instructor", prefix: "instructor/", lessons: await lessonFiles(dir), deep: await lessonFiles(dir, DEEP) });
}

// ---- a static file server on 127.0.0.1 ------------------------------------------------------
function serve(root) {
  const server = createServer(async (req, res) => {
    try {
      const url = new URL(req.url, "http://127.0.0.1");
      let file = path.normalize(path.join(root, decodeURIComponent(url.pathname)));
      if (file !== root && !file.startsWith(root + path.sep)) { res.writeHead(403).end(); return; }
      if ((await stat(file).catch(() => null))?.isDirectory()) file = path.join(file, "index.html");
      const body = await readFile(file);
      res.writeHead(200, { "Content-Type": TYPES[path.extname(file).toLowerCase()] || "application/octet-stream",
                           "Cache-Control": "no-store" });
      res.end(req.method === "HEAD" ? undefined : body);
    } catch {
      res.writeHead(404, { "Content-Type": "text/plain" }).end("not found");
    }
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

let server, context, profile, base;
const checked = new Map(); // url -> status, for the links checked once

before(async () => {
  server = await serve(SITE);
  base = `http://127.0.0.1:${server.address().port}/`;
  profile = await mkdtemp(path.join(tmpdir(), "course-chromium-"));
  context = await launchOffline(profile, TIMEOUT); // requests to another host are aborted, and reported by openPage
  if (SCREENSHOTS) await mkdir(SCREENSHOTS, { recursive: true });
});

after(async () => {
  await context?.close();
  await new Promise((resolve) => (server ? server.close(resolve) : resolve()));
  if (profile) await rm(profile, { recursive: true, force: true });
});

// ---- open one page and check what every page must satisfy -----------------------------------
async function openPage(rel) {
  const page = await context.newPage();
  const problems = [];
  page.on("request", (r) => {
    const u = new URL(r.url());
    if (["data:", "blob:", "about:"].includes(u.protocol)) return;
    if (!LOCAL_HOSTS.has(u.hostname)) problems.push(`request to another host: ${r.url()}`);
  });
  page.on("requestfailed", (r) => {
    const u = new URL(r.url());
    if (u.protocol !== "data:" && LOCAL_HOSTS.has(u.hostname)) problems.push(`failed request: ${r.url()} (${r.failure()?.errorText})`);
  });
  page.on("response", (r) => { if (r.status() >= 400) problems.push(`HTTP ${r.status()}: ${r.url()}`); });
  page.on("console", (m) => { if (m.type() === "error") problems.push(`console error: ${m.text()}`); });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));

  const resp = await page.goto(base + rel, { waitUntil: "load" });
  assert.equal(resp.status(), 200, `${rel}: HTTP ${resp.status()}`);
  await page.waitForSelector("html[data-math=done]", { timeout: TIMEOUT });
  await page.evaluate(() => document.fonts.ready);
  // every image decoded (not "networkidle": on the long pages Chromium at times never reports it, with no
  // request pending, and the wait ran out though everything had loaded)
  await page.waitForFunction(() => [...document.images].every((i) => i.complete));
  return { page, problems };
}

async function checkCommon(rel, page, problems) {
  // every image loaded
  const broken = await page.$$eval("img", (imgs) =>
    imgs.filter((i) => !i.complete || i.naturalWidth === 0).map((i) => (i.getAttribute("src") || "").slice(0, 80)));
  assert.deepEqual(broken, [], `${rel}: images that did not load`);

  // math: typeset where the source had math, no KaTeX error, no raw delimiters left in the text
  const expected = Number(await page.getAttribute('meta[name="course-math"]', "content"));
  const math = await page.evaluate(() => {
    const SKIP = "pre, code, script, style, textarea, .katex, .tex-dollar, .no-math";
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    const raw = [];
    let run = "", parent = null;
    const flush = () => {
      if (/\$\$|\$[^$\s][^$]*?\$|\\\(|\\\[|\\begin\{/.test(run)) raw.push(run.trim().slice(0, 120));
      run = "";
    };
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      if (n.parentElement.closest(SKIP)) continue;
      if (n.parentElement !== parent) { flush(); parent = n.parentElement; }
      run += n.textContent;
    }
    flush();
    return {
      katex: document.querySelectorAll(".katex").length,
      errors: [...document.querySelectorAll(".katex-error")].map((e) => e.getAttribute("title") || e.textContent),
      raw,
    };
  });
  assert.ok(math.katex >= expected, `${rel}: ${math.katex} KaTeX elements for ${expected} math expressions in the source`);
  assert.deepEqual(math.errors, [], `${rel}: KaTeX errors`);
  assert.deepEqual(math.raw, [], `${rel}: raw math left in the text`);

  // same-page anchors exist; links to other files of the site answer 200
  const links = await page.$$eval("a[href]", (as) => as.map((a) => ({ href: a.href, raw: a.getAttribute("href") })));
  for (const { href, raw } of links) {
    const u = new URL(href);
    if (!LOCAL_HOSTS.has(u.hostname)) continue; // links out are allowed (not fetched when the page opens)
    if (raw.startsWith("#")) {
      // as browsers do: the fragment as written, then percent-decoded (nbconvert's heading ids are encoded)
      const frag = raw.slice(1);
      const found = await page.evaluate((f) => {
        let decoded = f;
        try { decoded = decodeURIComponent(f); } catch {}
        return f === "" || f === "top" || !!document.getElementById(f) || !!document.getElementById(decoded);
      }, frag);
      assert.ok(found, `${rel}: no element #${frag}`);
      continue;
    }
    const target = u.origin + u.pathname;
    if (!checked.has(target)) checked.set(target, (await fetch(target, { method: "HEAD" })).status);
    assert.equal(checked.get(target), 200, `${rel}: broken link ${raw}`);
  }
  if (SCREENSHOTS) {
    await page.screenshot({ path: path.join(SCREENSHOTS, rel.replace(/\//g, "_") + ".png"), fullPage: true });
  }
  assert.deepEqual(problems, [], `${rel}: problems while loading`);
}

const navHref = (page, cls) =>
  page.$eval(`nav.lesson-nav-top a.${cls}`, (a) => a.getAttribute("href")).catch(() => null);

// ---- the tests --------------------------------------------------------------------------------
for (const ed of EDITIONS) {
  describe(`${ed.name} edition`, () => {
    test("has lessons", () => assert.ok(ed.lessons.length > 0, `no NN_*.html page in ${SITE}/${ed.prefix}`));

    test(`${ed.prefix}index.html lists every lesson in order with title, summary and duration`, async () => {
      const rel = `${ed.prefix}index.html`;
      const { page, problems } = await openPage(rel);
      try {
        assert.ok((await page.textContent("h1")).trim().length > 0, "the course title");
        const cards = await page.$$eval(".lesson-list > li", (lis) => lis.map((li) => ({
          href: li.querySelector("a.lesson-link")?.getAttribute("href"),
          title: li.querySelector(".lesson-title")?.textContent.trim(),
          summary: li.querySelector(".lesson-summary")?.textContent.trim(),
          duration: li.querySelector(".lesson-duration")?.textContent.trim(),
        })));
        assert.deepEqual(cards.map((c) => c.href), ed.lessons, "lesson links in order");
        const deep = await page.$$eval(".going-further .deep-list > li a.lesson-link", (as) => as.map((a) => a.getAttribute("href")));
        assert.deepEqual(deep, ed.deep, "the deep dives, under Going further, in order");
        for (const c of cards) {
          assert.ok(c.title, `${c.href}: a title`);
          assert.ok(c.summary, `${c.href}: a summary`);
          assert.match(c.duration || "", /\d/, `${c.href}: a duration`);
        }
        const guide = await page.$("a[href='guide.html']");
        assert.equal(Boolean(guide), ed.name === "instructor", `${rel}: the instructor guide is linked from the instructor edition only`);
        await checkCommon(rel, page, problems);
      } finally {
        await page.close();
      }
    });

    ed.deep.forEach((file) => {
      const rel = ed.prefix + file;
      test(rel, async () => {
        const { page, problems } = await openPage(rel);
        try {  // back to its lesson, on to the next
          const own = ed.lessons.find((f) => f.slice(0, 2) === file.slice(0, 2)) ?? null;
          const next = ed.lessons.find((f) => f.slice(0, 2) > file.slice(0, 2)) ?? null;
          assert.equal(await navHref(page, "nav-prev"), own, `${rel}: back to its lesson`);
          assert.equal(await navHref(page, "nav-next"), next, `${rel}: on to the next lesson`);
          const nbHref = await page.$eval("a.download", (a) => a.href);
          assert.ok(nbHref.endsWith(file.replace(/\.html$/, ".ipynb")), `${rel}: download link ${nbHref}`);
          await checkCommon(rel, page, problems);
        } finally {
          await page.close();
        }
      });
    });

    if (ed.name === "instructor") {
      test(`${ed.prefix}guide.html`, async () => {
        const rel = `${ed.prefix}guide.html`;
        const { page, problems } = await openPage(rel);
        try {
          assert.match(await page.textContent("article.guide h1"), /Instructor guide/);
          assert.ok((await page.$$("article.guide h2")).length >= ed.lessons.length, `${rel}: a section per lesson`);
          await checkCommon(rel, page, problems);
        } finally {
          await page.close();
        }
      });
    }

    ed.lessons.forEach((file, i) => {
      const rel = ed.prefix + file;
      test(rel, async () => {
        const { page, problems } = await openPage(rel);
        try {
          // prev / next / index links point at the neighbours, and following them lands there
          const expect = { "nav-prev": ed.lessons[i - 1] ?? null, "nav-next": ed.lessons[i + 1] ?? null, "nav-index": "index.html" };
          for (const [cls, want] of Object.entries(expect)) {
            assert.equal(await navHref(page, cls), want, `${rel}: ${cls} link`);
          }
          for (const [cls, want] of Object.entries(expect)) {
            if (!want) continue;
            const nav = await context.newPage();
            await nav.goto(base + rel, { waitUntil: "domcontentloaded" });
            await Promise.all([nav.waitForURL(base + ed.prefix + want), nav.click(`nav.lesson-nav-bottom a.${cls}`)]);
            await nav.close();
          }

          // the notebook download is this lesson's notebook
          const nbHref = await page.$eval("a.download", (a) => a.href);
          assert.ok(nbHref.endsWith(file.replace(/\.html$/, ".ipynb")), `${rel}: download link ${nbHref}`);
          const nb = await (await fetch(nbHref)).json();
          assert.ok(Array.isArray(nb.cells) && nb.cells.length > 0, `${rel}: the notebook download has cells`);
          if (ed.name === "learner") {
            const tagged = nb.cells.filter((c) => (c.metadata?.tags || []).includes("instructor"));
            assert.equal(tagged.length, 0, `${rel}: the learner's notebook has instructor cells`);
          }

          // recorded data are shown as tables (pandas' Styler HTML), rendered with cells
          const styled = nb.cells.reduce((n, c) => n + (c.outputs || []).filter((o) =>
            String((o.data || {})["text/html"] || "").includes('class="course-table"')).length, 0);
          const tables = await page.$$eval("table.course-table", (ts) => ts.map((t) => ({
            cells: t.querySelectorAll("tbody td").length,
            visible: t.getBoundingClientRect().width > 0 && getComputedStyle(t).display !== "none",
          })));
          assert.equal(tables.length, styled, `${rel}: ${styled} data tables in the notebook, ${tables.length} on the page`);
          for (const [k, t] of tables.entries()) {
            assert.ok(t.cells > 0 && t.visible, `${rel}: data table ${k + 1} is empty or hidden`);
          }
          if (/^0[3-8]_/.test(file)) assert.ok(tables.length > 0, `${rel}: a lesson with recorded data shows no data table`);

          // code is highlighted
          assert.ok((await page.$$(".highlight pre span")).length > 0 || (await page.$$(".highlight")).length === 0,
                    `${rel}: code not highlighted`);

          // solutions: hidden until their summary is clicked
          const solutions = await page.$$("details.solution");
          for (const [k, d] of solutions.entries()) {
            const body = await d.$(".solution-body");
            assert.ok(body, `${rel}: solution ${k + 1} has a body`);
            assert.equal(await d.evaluate((e) => e.open), false, `${rel}: solution ${k + 1} starts open`);
            assert.equal(await body.isVisible(), false, `${rel}: solution ${k + 1} visible before the click`);
            await (await d.$("summary")).click();
            await page.waitForFunction((e) => e.open, d);
            assert.equal(await body.isVisible(), true, `${rel}: solution ${k + 1} hidden after the click`);
          }

          await checkCommon(rel, page, problems);
        } finally {
          await page.close();
        }
      });
    });
  });
}

test("the site has at least one solution to click", async () => {
  let found = 0;
  for (const f of EDITIONS[0].lessons) found += ((await readFile(path.join(SITE, f), "utf8")).match(/<details class="solution">/g) || []).length;
  assert.ok(found > 0, "no solution cell on any lesson page");
});
