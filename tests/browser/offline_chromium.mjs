// What the two browser tests (test_site.mjs, test_lab.mjs) share: headless Chromium (Debian's /usr/bin/chromium
// through playwright-core; CHROMIUM overrides) on a fresh profile, whose requests to any host but this
// machine are aborted, so that nothing is fetched from the network.

import { chromium } from "playwright-core";

export const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
export const LOCAL_HOSTS = new Set(["127.0.0.1", "localhost", "[::1]"]);

// A browser context on the profile folder `profile` (empty: a fresh profile), `timeout` ms its default.
export async function launchOffline(profile, timeout) {
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1400, height: 1000 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-dev-shm-usage"],
  });
  context.setDefaultTimeout(timeout);
  // Requests for another host never leave this machine: aborted here.
  await context.route("**/*", (route) => {
    const u = new URL(route.request().url());
    if (u.protocol === "data:" || u.protocol === "blob:" || LOCAL_HOSTS.has(u.hostname)) return route.continue();
    return route.abort("blockedbyclient");
  });
  return context;
}
