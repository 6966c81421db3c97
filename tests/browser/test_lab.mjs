// Browser test of the course in JupyterLab (`make test-lab`).
//
// Starts JupyterLab the way `make lab` does, with tools/lab.py, on a headless machine (DISPLAY and
// WAYLAND_DISPLAY unset, so the script adds --no-browser; --allow-root when run as root), with:
// a free 127.0.0.1 port, a random token, a COPY of notebooks/ in a temp dir as the root directory
// (the repository's notebooks are never touched), JUPYTER_CONFIG_DIR / JUPYTER_DATA_DIR /
// JUPYTER_RUNTIME_DIR / IPYTHONDIR in that temp dir, and nothing fetched from the network (no news,
// no update check, read-only extension manager; the browser's requests to other hosts are aborted).
//
// Then opens every lesson (notebooks/NN_*.ipynb, found, not listed) in headless Chromium (Debian's
// /usr/bin/chromium through playwright-core; CHROMIUM overrides), clears its outputs, runs
// JupyterLab's own "Run All Cells" command (notebook:run-all-cells, through window.jupyterapp,
// which --expose-app-in-browser provides), waits until the run is over and the kernel is idle, and
// checks: every code cell ran (an execution count, no [*]), no cell shows an error (an error
// output, or a traceback on stderr), and every lesson with exercises prints at least one
// "Exercise N.k (...): not yet" line. Prints a per-lesson summary at the end.
//
// The server, its kernels and the browser are stopped in `after`, also when a test fails or the
// run is interrupted. Environment: LAB_PYTHON (the course's python, default .venv/bin/python),
// LAB_NOTEBOOK_TIMEOUT_S (per lesson, default 240), LAB_TOTAL_TIMEOUT_S (the whole run, default
// 1500), LAB_SCREENSHOTS=DIR (a PNG of each lesson after its run), LAB_KEEP=1 (keep the temp dir).
//
// Run: node --test tests/browser/test_lab.mjs

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { cp, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { existsSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { createHash, randomBytes } from "node:crypto";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { launchOffline } from "./offline_chromium.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const VENV_PY = path.join(ROOT, ".venv", "bin", "python");
const PYTHON = process.env.LAB_PYTHON || (existsSync(VENV_PY) ? VENV_PY : "python3");
const NB_TIMEOUT = Number(process.env.LAB_NOTEBOOK_TIMEOUT_S || 240) * 1000;
const TOTAL_TIMEOUT = Number(process.env.LAB_TOTAL_TIMEOUT_S || 1500) * 1000;
const SCREENSHOTS = process.env.LAB_SCREENSHOTS || "";
const START_TIMEOUT = 120_000;
const UI_TIMEOUT = 60_000;
const T0 = Date.now();

// ---- the lessons, and what each one's source promises -----------------------------------------
const NB_DIR = path.join(ROOT, "notebooks");
const LESSONS = readdirSync(NB_DIR).filter((f) => /^\d\d_.*\.ipynb$/.test(f)).sort();
const digest = () => Object.fromEntries(readdirSync(NB_DIR, { withFileTypes: true }).filter((e) => e.isFile())
  .map((e) => [e.name, createHash("sha256").update(readFileSync(path.join(NB_DIR, e.name))).digest("hex")]).sort());
const NB_BEFORE = digest();

function exercisesOf(file) {
  const nb = JSON.parse(readFileSync(path.join(NB_DIR, file), "utf8"));
  const ids = [];
  for (const c of nb.cells) {
    if (c.cell_type !== "markdown") continue;
    const src = Array.isArray(c.source) ? c.source.join("") : c.source;
    for (const m of src.matchAll(/^#+\s*Exercise\s+(\d+\.\d+)/gm)) ids.push(m[1]);
  }
  return ids;
}

// ---- the server -------------------------------------------------------------------------------
let tmp, server, serverExited, log = "", base, token, context;
const summary = [];

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.unref();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const logTail = (n = 40) => log.split("\n").slice(-n).join("\n");

// processes whose command line mentions our temp dir (the kernels: their connection files live in
// its runtime dir), for the cleanup; `ps` works on Linux and macOS
function ourProcesses() {
  if (!tmp) return [];
  try {
    return execFileSync("ps", ["-axww", "-o", "pid=,command="], { encoding: "utf8" }).split("\n")
      .map((l) => l.trim().match(/^(\d+)\s+(.*)$/)).filter((m) => m && m[2].includes(tmp) && Number(m[1]) !== process.pid)
      .map((m) => Number(m[1]));
  } catch { return []; }
}

function killGroup(signal) {
  if (!server || server.exitCode !== null || server.signalCode !== null) return;
  try { process.kill(-server.pid, signal); } catch {}
}

async function stopServer() {
  if (server) {
    killGroup("SIGTERM"); // JupyterLab shuts its kernels down on SIGTERM
    const deadline = Date.now() + 20_000;
    while (server.exitCode === null && server.signalCode === null && Date.now() < deadline) await sleep(200);
    killGroup("SIGKILL");
  }
  for (let i = 0; i < 25; i++) { // kernels live in their own sessions: by pid, if any is left
    const left = ourProcesses();
    if (!left.length) break;
    for (const pid of left) { try { process.kill(pid, i < 10 ? "SIGTERM" : "SIGKILL"); } catch {} }
    await sleep(200);
  }
}

// last resort when node is stopped: no server outlives the test
process.on("exit", () => {
  killGroup("SIGKILL");
  for (const pid of ourProcesses()) { try { process.kill(pid, "SIGKILL"); } catch {} }
  if (tmp && !process.env.LAB_KEEP) { try { rmSync(tmp, { recursive: true, force: true }); } catch {} }
});
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => process.exit(130));

before(async () => {
  tmp = await mkdtemp(path.join(tmpdir(), "course-lab-"));
  const root = path.join(tmp, "notebooks");
  await cp(NB_DIR, root, { recursive: true });
  const dirs = {};
  for (const d of ["config", "data", "runtime", "ipython", "chromium"]) await mkdir((dirs[d] = path.join(tmp, d)));
  // JupyterLab asks once "Would you like to get notified about official Jupyter news?" (a toast):
  // answered "Never" in the throwaway settings, as a learner would
  const settings = path.join(dirs.config, "lab", "user-settings", "@jupyterlab", "apputils-extension");
  await mkdir(settings, { recursive: true });
  await writeFile(path.join(settings, "notification.jupyterlab-settings"),
                  JSON.stringify({ fetchNews: "false", checkForUpdates: false }));
  const port = await freePort();
  token = randomBytes(24).toString("hex");
  base = `http://127.0.0.1:${port}`;

  const env = { ...process.env, JUPYTER_CONFIG_DIR: dirs.config, JUPYTER_DATA_DIR: dirs.data,
                JUPYTER_RUNTIME_DIR: dirs.runtime, IPYTHONDIR: dirs.ipython, PYTHONUNBUFFERED: "1" };
  delete env.DISPLAY; // headless, like CI and a GPU server: tools/lab.py adds --no-browser
  delete env.WAYLAND_DISPLAY;
  const args = [path.join(ROOT, "tools", "lab.py"),
    `--ServerApp.root_dir=${root}`, `--port=${port}`, "--ServerApp.port_retries=0", "--ip=127.0.0.1",
    `--IdentityProvider.token=${token}`,
    "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    "--LabApp.extension_manager=readonly", "--expose-app-in-browser"];
  server = spawn(PYTHON, args, { cwd: ROOT, env, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  serverExited = new Promise((resolve) => server.on("exit", (code, sig) => resolve(`exited (${code ?? sig})`)));
  server.stdout.on("data", (d) => (log += d));
  server.stderr.on("data", (d) => (log += d));

  // up when /api/status answers with the token
  const deadline = Date.now() + START_TIMEOUT;
  for (;;) {
    const gone = await Promise.race([serverExited, sleep(500).then(() => null)]);
    if (gone) throw new Error(`JupyterLab ${gone} before it served:\n${logTail()}`);
    try {
      const r = await fetch(`${base}/api/status`, { headers: { Authorization: `token ${token}` } });
      if (r.status === 200) break;
    } catch {}
    if (Date.now() > deadline) throw new Error(`JupyterLab did not answer within ${START_TIMEOUT / 1000} s:\n${logTail()}`);
  }
  // started as make lab starts it on a headless machine (tools/lab.py execs JupyterLab in place)
  const cmd = execFileSync("ps", ["-ww", "-o", "command=", "-p", String(server.pid)], { encoding: "utf8" });
  assert.match(cmd, /-m jupyterlab .*--no-browser/, `the server's command: ${cmd}`);
  assert.equal(/--allow-root/.test(cmd), process.getuid?.() === 0, `--allow-root exactly when root: ${cmd}`);

  context = await launchOffline(dirs.chromium, UI_TIMEOUT); // a fresh profile; requests to other hosts aborted
  // log in once: the token in the URL sets the login cookie for the other pages
  const page = await context.newPage();
  const resp = await page.goto(`${base}/lab?token=${token}`);
  assert.equal(resp.status(), 200, "GET /lab with the token");
  await page.close();
  if (SCREENSHOTS) await mkdir(SCREENSHOTS, { recursive: true });
}, { timeout: START_TIMEOUT + UI_TIMEOUT });

after(async () => {
  try { await context?.close(); } catch {}
  await stopServer();
  if (summary.length) {
    const w = Math.max(...summary.map((s) => s.file.length));
    const lines = summary.map((s) =>
      `  ${s.file.padEnd(w)}  ${s.ok ? "ok  " : "FAIL"}  ${String(s.ran).padStart(3)}/${String(s.code).padEnd(3)} code cells ran  ` +
      `${s.notYet}/${s.exercises} exercises "not yet"  ${s.errors} errors  ${s.stderr} stderr outputs  ${s.seconds.toFixed(1)} s`);
    process.stderr.write(`\nJupyterLab run of every lesson (${((Date.now() - T0) / 1000).toFixed(1)} s in all, server start included):\n${lines.join("\n")}\n`);
  }
  const left = ourProcesses();
  if (tmp && !process.env.LAB_KEEP) await rm(tmp, { recursive: true, force: true });
  assert.deepEqual(left, [], "processes of the test's JupyterLab still running after the cleanup");
}, { timeout: 60_000 });

// ---- one lesson -------------------------------------------------------------------------------
async function runLesson(file) {
  const page = await context.newPage();
  const notes = [];
  page.on("pageerror", (e) => notes.push(`page error: ${e.message}`));
  page.on("requestfailed", (r) => { if (r.failure()?.errorText?.includes("BLOCKED")) notes.push(`blocked: ${r.url()}`); });
  try {
    await page.goto(`${base}/lab?reset`, { waitUntil: "domcontentloaded" });
    await page.waitForFunction(() => !!window.jupyterapp, null, { timeout: UI_TIMEOUT });
    await page.evaluate(() => Promise.all([window.jupyterapp.started, window.jupyterapp.restored]));

    // open it with the course's kernel, clear the stored outputs, then Run All Cells
    const opened = await page.evaluate(async (nb) => {
      const app = window.jupyterapp;
      const panel = await app.commands.execute("docmanager:open", { path: nb, factory: "Notebook", kernel: { name: "python3" } });
      await panel.context.ready;
      await panel.sessionContext.ready;
      app.shell.activateById(panel.id);
      if (app.shell.currentWidget !== panel) return { error: "the notebook is not the current widget" };
      window.__lesson = panel;
      await app.commands.execute("notebook:clear-all-cell-outputs");
      const code = panel.content.model.sharedModel.cells.filter((c) => c.cell_type === "code").length;
      window.__run = undefined;
      app.commands.execute("notebook:run-all-cells").then((ok) => (window.__run = { ok }),
                                                         (e) => (window.__run = { ok: false, error: String(e) }));
      return { code, kernel: panel.sessionContext.session?.kernel?.name };
    }, file);
    assert.ok(!opened.error, `${file}: ${opened.error}`);
    assert.equal(opened.kernel, "python3", `${file}: kernel`);

    // wait: the command's run is over, the kernel is idle, and no prompt shows [*]
    const left = TOTAL_TIMEOUT - (Date.now() - T0);
    await page.waitForFunction(() => {
      const p = window.__lesson;
      return window.__run !== undefined && p.sessionContext.session?.kernel?.status === "idle" &&
        ![...p.node.querySelectorAll(".jp-CodeCell .jp-InputPrompt")].some((e) => e.textContent.includes("*"));
    }, null, { timeout: Math.max(1000, Math.min(NB_TIMEOUT, left)), polling: 500 })
      .catch((e) => { throw new Error(`${file}: still running after ${Math.min(NB_TIMEOUT, left) / 1000} s (${e.message.split("\n")[0]})`); });

    // what ran, and what it printed (the model, and what the page shows)
    const r = await page.evaluate(() => {
      const p = window.__lesson;
      const cells = [];
      p.content.widgets.forEach((w, i) => {
        if (w.model.type !== "code") return;
        const outs = w.model.outputs.toJSON();
        const shown = [...w.node.querySelectorAll(".jp-OutputArea-output")];
        cells.push({
          index: i + 1,
          count: w.model.executionCount,
          prompt: w.node.querySelector(".jp-InputPrompt")?.textContent.trim() ?? "",
          source: w.model.sharedModel.getSource().split("\n")[0].slice(0, 70),
          errors: outs.filter((o) => o.output_type === "error").map((o) => `${o.ename}: ${o.evalue}`),
          stderr: outs.filter((o) => o.output_type === "stream" && o.name === "stderr").length,
          shownTracebacks: shown.filter((e) => e.getAttribute("data-mime-type") === "application/vnd.jupyter.stderr" &&
                                               /Traceback/.test(e.textContent)).map((e) => e.textContent.trim().split("\n").slice(-1)[0].slice(0, 160)),
          // what the page shows, and what the kernel sent (JupyterLab 4 may not render cells far from the
          // viewport: their outputs are in the model all the same)
          text: shown.map((e) => e.innerText).concat(
            outs.filter((o) => o.output_type === "stream").map((o) => (Array.isArray(o.text) ? o.text.join("") : o.text))).join("\n"),
        });
      });
      return { run: window.__run, cells, status: p.sessionContext.session?.kernel?.status };
    });

    const notRun = r.cells.filter((c) => c.count === null || !/^\[\d+\]:?$/.test(c.prompt));
    const errors = r.cells.filter((c) => c.errors.length || c.shownTracebacks.length);
    const notYet = new Set();
    for (const c of r.cells) for (const m of c.text.matchAll(/^Exercise (\d+\.\d+) \(.*\): not yet/gm)) notYet.add(m[1]);
    const exercises = exercisesOf(file);
    return { page, notes, opened, r, notRun, errors, notYet, exercises };
  } catch (e) {
    await closeLesson(page);
    throw e;
  }
}

// shut the lesson's kernel down (also when it is still busy) and close its page
async function closeLesson(page) {
  await page.evaluate(async () => {
    const p = window.__lesson;
    if (!p) return;
    p.context.model.dirty = false;
    await p.sessionContext.shutdown();
  }).catch(() => {});
  await page.close().catch(() => {});
}

describe("every lesson runs in JupyterLab", () => {
  test("there are lessons", () => assert.ok(LESSONS.length > 0, `no NN_*.ipynb in ${NB_DIR}`));

  for (const file of LESSONS) {
    test(file, { timeout: NB_TIMEOUT + 2 * UI_TIMEOUT }, async (t) => {
      assert.ok(Date.now() - T0 < TOTAL_TIMEOUT, `the run is over its total time (LAB_TOTAL_TIMEOUT_S=${TOTAL_TIMEOUT / 1000})`);
      const t1 = Date.now();
      const s = { file, ok: false, code: "?", ran: 0, notYet: 0, exercises: exercisesOf(file).length, errors: 0, stderr: 0, seconds: 0 };
      summary.push(s);
      let res;
      try {
        res = await runLesson(file);
      } catch (e) {
        t.diagnostic(`${file}: the server's log ends with:\n${logTail(20)}`);
        throw e;
      } finally {
        s.seconds = (Date.now() - t1) / 1000;
      }
      const { page, notes, opened, r, notRun, errors, notYet, exercises } = res;
      try {
        Object.assign(s, { code: opened.code, ran: r.cells.length - notRun.length, notYet: notYet.size,
                           errors: errors.length, stderr: r.cells.reduce((n, c) => n + c.stderr, 0) });
        if (SCREENSHOTS) await page.screenshot({ path: path.join(SCREENSHOTS, file.replace(/\.ipynb$/, ".png")) });
        for (const n of notes) t.diagnostic(`${file}: ${n}`);
        t.diagnostic(`${file}: ${s.ran}/${s.code} code cells ran, ${s.notYet}/${s.exercises} exercises print "not yet", ` +
                     `${s.errors} errors, ${s.seconds.toFixed(1)} s`);

        assert.equal(r.cells.length, opened.code, `${file}: code cells in the page`);
        assert.deepEqual(errors.map((c) => `cell ${c.index} (${c.source}): ${[...c.errors, ...c.shownTracebacks].join(" | ")}`), [],
                         `${file}: cells with an error`);
        assert.deepEqual(notRun.map((c) => `cell ${c.index} ${c.prompt || "(no prompt)"} ${c.source}`), [],
                         `${file}: code cells that did not run`);
        assert.equal(r.run?.ok, true, `${file}: Run All Cells did not succeed (${JSON.stringify(r.run)})`);
        assert.equal(r.status, "idle", `${file}: kernel status`);
        if (exercises.length) {
          const missing = exercises.filter((id) => !notYet.has(id));
          assert.deepEqual(missing, [], `${file}: exercises whose checker printed no "Exercise N.k (...): not yet" line`);
          for (const id of notYet) assert.ok(exercises.includes(id), `${file}: "not yet" for Exercise ${id}, which has no heading`);
        }
        s.ok = true;
      } finally {
        await closeLesson(page);
      }
    });
  }
});

test("the repository's notebooks/ is untouched (the lab ran on a copy)", () => {
  assert.deepEqual(digest(), NB_BEFORE);
});
