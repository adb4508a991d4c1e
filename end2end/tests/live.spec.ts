import { expect, test, type APIRequestContext, type Page } from '@playwright/test';

// The live feed: pages update through /live/… with no server-function
// polling, and a hidden tab closes its connection.

async function submit(request: APIRequestContext, plan: object): Promise<number> {
  const res = await request.post('/api/v1/plans', { data: plan });
  expect(res.status(), await res.text()).toBe(201);
  return (await res.json()).id;
}

async function hydrated(page: Page, url: string) {
  await page.goto(url);
  await expect(page.locator('#baton')).toHaveAttribute('data-hydrated', 'true');
}

/** A sample of the server's /metrics, e.g. `baton_live_subscribers`. */
async function metric(request: APIRequestContext, name: string): Promise<number> {
  const text = await (await request.get('/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  expect(line, `${name} in /metrics`).toBeTruthy();
  return Number(line!.split(' ')[1]);
}

/** Keeps every EventSource the page opens in `window.__feeds`. */
async function recordFeeds(page: Page) {
  await page.addInitScript(() => {
    const w = window as any;
    w.__feeds = [];
    const Real = w.EventSource;
    w.EventSource = class extends Real {
      constructor(url: string, init?: EventSourceInit) {
        super(url, init);
        w.__feeds.push(this);
      }
    };
  });
}

/** Pretends the tab was hidden or shown, as the browser tells a page. */
async function setHidden(page: Page, hidden: boolean) {
  await page.evaluate((hidden) => {
    Object.defineProperty(document, 'hidden', { configurable: true, get: () => hidden });
    Object.defineProperty(document, 'visibilityState', {
      configurable: true,
      get: () => (hidden ? 'hidden' : 'visible'),
    });
    document.dispatchEvent(new Event('visibilitychange'));
  }, hidden);
}

/** readyState of each feed the page opened (0 connecting, 1 open, 2 closed). */
async function feedStates(page: Page): Promise<number[]> {
  return page.evaluate(() => (window as any).__feeds.map((f: EventSource) => f.readyState));
}

test.describe.configure({ mode: 'serial' });

test('a plan page updates through the live feed with polling off', async ({ page, request }) => {
  const id = await submit(request, {
    name: 'e2e-live',
    tasks: [{ name: 'long', target: 'db/e2e-live', sleep: '1h' }],
  });
  const task = (await (await request.get(`/api/v1/plans/${id}`)).json()).tasks[0].id;
  // No server function may answer: whatever the page shows next came
  // through the feed.
  const calls: string[] = [];
  page.on('request', (r) => {
    if (r.url().includes('/_fn/')) calls.push(r.url());
  });
  await page.route('**/_fn/**', (route) => route.abort());
  await hydrated(page, `/plans/${id}`);
  await page.evaluate(() => ((window as any).__sameDocument = true));
  const row = page.locator('#tasks tr[data-task-name="long"]');
  await expect(row).toHaveAttribute('data-status', 'RUNNING', { timeout: 20_000 });

  const res = await request.post(`/api/v1/tasks/${task}/cancel`);
  expect(res.status(), await res.text()).toBe(200);
  await expect(row).toHaveAttribute('data-status', 'CANCELED', { timeout: 10_000 });

  expect(await page.evaluate(() => (window as any).__sameDocument)).toBe(true);
  expect(calls, 'the page polled a server function').toEqual([]);
});

test('a hidden tab closes its feed and opens a new one when shown again', async ({ page, request }) => {
  test.setTimeout(60_000);
  await recordFeeds(page);
  await hydrated(page, '/');
  await expect.poll(() => feedStates(page)).toEqual([1]);
  expect(await metric(request, 'baton_live_subscribers')).toBeGreaterThanOrEqual(1);

  await setHidden(page, true);
  await expect.poll(() => feedStates(page)).toEqual([2]);
  // The server lets the connection go, and with it the view's refresher.
  await expect
    .poll(() => metric(request, 'baton_live_subscribers'), { timeout: 30_000 })
    .toBe(0);

  await setHidden(page, false);
  await expect.poll(() => feedStates(page)).toEqual([2, 1]);
  await expect.poll(() => metric(request, 'baton_live_subscribers')).toBe(1);
  // The reopened feed's first message is the current view.
  await expect(page.locator('[data-count="RUNNING"]')).toBeVisible();
});

test('a page whose feed is refused polls its server function instead', async ({ page }) => {
  // As a replica past BATON_LIVE_MAX_VIEWS answers.
  await page.route('**/live/**', (route) =>
    route.fulfill({ status: 503, contentType: 'text/plain', body: 'too many live views' }),
  );
  const polls: string[] = [];
  page.on('request', (r) => {
    if (r.url().includes('/_fn/overview')) polls.push(r.url());
  });
  await hydrated(page, '/');
  // One poll at once, then one every 2 s: the page stays live.
  await expect.poll(() => polls.length, { timeout: 10_000 }).toBeGreaterThanOrEqual(2);
  await expect(page.locator('[data-count="RUNNING"]')).toBeVisible();
});
