import { expect, test, type APIRequestContext, type Page } from '@playwright/test';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

// The pages as an operator sees them, saved on every run; the README and
// docs/operations.md show the committed copies.
const shots = path.resolve(__dirname, '..', '..', 'docs', 'screenshots');
fs.mkdirSync(shots, { recursive: true });

async function shot(page: Page, name: string) {
  await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true });
}

async function planCount(request: APIRequestContext): Promise<number> {
  const res = await request.get('/api/v1/plans?limit=1');
  expect(res.status()).toBe(200);
  return (await res.json()).total;
}

async function submit(request: APIRequestContext, plan: object): Promise<number> {
  const res = await request.post('/api/v1/plans', { data: plan });
  expect(res.status(), await res.text()).toBe(201);
  return (await res.json()).id;
}

/** A row of the plan page's task table. */
function taskRow(page: Page, name: string) {
  return page.locator(`#tasks tr[data-task-name="${name}"]`);
}

/** Marks the document; a reload (which the live pages must not need) drops the mark. */
async function markDocument(page: Page) {
  await page.evaluate(() => ((window as any).__sameDocument = true));
}

async function expectSameDocument(page: Page) {
  expect(await page.evaluate(() => (window as any).__sameDocument)).toBe(true);
}

async function hydrated(page: Page, url: string) {
  await page.goto(url);
  await expect(page.locator('#baton')).toHaveAttribute('data-hydrated', 'true');
}

test.describe.configure({ mode: 'serial' });

test('the overview shows this replica alive and leading', async ({ page }) => {
  await hydrated(page, '/');
  const replica = page.locator('#replicas tbody tr').first();
  await expect(replica).toHaveAttribute('data-alive', 'true');
  // The leader lease is taken within a renewal round of start-up.
  await expect(replica).toHaveAttribute('data-leader', 'true', { timeout: 10_000 });
  await expect(replica).toContainText('leader');
  await expect(page.locator('#throughput-chart')).toBeVisible();
});

test('an invalid plan shows the field error inline and creates nothing', async ({ page, request }) => {
  const before = await planCount(request);
  await hydrated(page, '/plans/new');
  await page.fill(
    '#plan-text',
    'name: broken\ntasks:\n  - name: a\n    target: db/a\n    timeout: soon\n    sleep: 1s\n',
  );
  await page.click('#submit-form button[type=submit]');
  const error = page.locator('#plan-error [role=alert]');
  await expect(error).toBeVisible();
  await expect(error.locator('[data-field]')).toHaveText('tasks[0].timeout');
  await expect(page.locator('#plan-text')).toHaveAttribute('aria-invalid', 'true');
  await expect(page).toHaveURL(/\/plans\/new$/);
  await shot(page, 'submit-invalid');
  expect(await planCount(request)).toBe(before);
});

test('a plan submitted through the form runs to DONE without a reload', async ({ page }) => {
  await hydrated(page, '/plans/new');
  await page.fill(
    '#plan-text',
    [
      'name: e2e-release',
      'description: Two migrations and a cache warm-up',
      'parallel_limit: 2',
      'tasks:',
      '  - name: migrate-orders',
      '    target: db/orders',
      '    version: "0042"',
      '    command: {argv: [sh, -c, "echo migrating orders; sleep 1; echo done"]}',
      '  - name: migrate-users',
      '    target: db/users',
      '    version: "0007"',
      '    command: {argv: [sh, -c, "echo migrating users; sleep 1"]}',
      '  - name: warm-cache',
      '    target: cache/eu',
      '    exclusive: false',
      '    sleep: 2s',
    ].join('\n'),
  );
  await page.click('#submit-form button[type=submit]');
  await expect(page).toHaveURL(/\/plans\/\d+$/);
  await expect(page.locator('#plan-name')).toHaveText('e2e-release');
  await markDocument(page);
  for (const name of ['migrate-orders', 'migrate-users', 'warm-cache']) {
    await expect(taskRow(page, name)).toHaveAttribute('data-status', 'DONE', { timeout: 20_000 });
  }
  await expect(page.locator('#plan-status')).toContainText('DONE');
  await expect(page.locator('#notification-state')).toHaveAttribute('data-event', 'PIPELINE_COMPLETED');
  await expectSameDocument(page);
  await shot(page, 'plan');

  // The run page: history, heartbeat, the captured output.
  await taskRow(page, 'migrate-orders').locator('a').first().click();
  await expect(page).toHaveURL(/\/runs\/\d+$/);
  await expect(page.locator('#run-log')).toContainText('migrating orders');
  await expect(page.locator('#timeline li')).toHaveCount(4);
  // Its deadlines bound it only while it ran: a DONE run shows none.
  await expect(page.locator('#run-heartbeat-deadline')).toHaveText('—');
  await expect(page.locator('#run-deadline')).toHaveText('—');
  await shot(page, 'run');
});

test('a failing task shows its error; Retry starts attempt 2 and resets the notification', async ({ page, request }) => {
  // The receiver refuses the first delivery, so the page shows a retried one.
  const received: string[] = [];
  const receiver = http.createServer((req, res) => {
    req.resume();
    received.push(String(req.headers['x-baton-event']));
    res.statusCode = received.length === 1 ? 500 : 200;
    res.end();
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  const port = (receiver.address() as { port: number }).port;
  const mark = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'baton-e2e-')), 'fixed');
  try {
    const id = await submit(request, {
      name: 'e2e-flaky',
      webhooks: [{ url: `http://127.0.0.1:${port}/hook` }],
      tasks: [
        { name: 'ok', target: 'db/flaky-a', sleep: '0s' },
        {
          name: 'check-mark',
          target: 'db/flaky-b',
          command: { argv: ['sh', '-c', `test -f '${mark}' && echo fixed || { echo "mark missing" >&2; exit 3; }`] },
        },
      ],
    });
    await hydrated(page, `/plans/${id}`);
    await markDocument(page);
    const row = taskRow(page, 'check-mark');
    await expect(row).toHaveAttribute('data-status', 'FAILED', { timeout: 20_000 });
    // The error quotes the command's last stderr line, where the eye is.
    await expect(row.locator('.task-error')).toHaveText('exited with code 3: mark missing');
    await expect(page.locator('#notification-state')).toHaveAttribute('data-event', 'PIPELINE_FAILED');
    // The refused delivery is retried and then delivered.
    await expect(page.locator('.deliveries tr[data-state="DELIVERED"]')).toHaveCount(1, { timeout: 20_000 });
    await shot(page, 'plan-failed');

    // Fix the cause, then Retry: attempt 2 runs; the claim of the failed
    // phase was cleared, so the completion is notified too.
    fs.writeFileSync(mark, '');
    await row.locator('button[data-action="task_retry"]').click();
    await expect(page.locator('#action-result')).toContainText('retried');
    await expect(row).toHaveAttribute('data-status', 'DONE', { timeout: 20_000 });
    await expect(row.locator('td').nth(4)).toHaveText('2');
    await expect(page.locator('#notification-state')).toHaveAttribute('data-event', 'PIPELINE_COMPLETED', {
      timeout: 10_000,
    });
    await expect(page.locator('.deliveries tr[data-state="DELIVERED"]')).toHaveCount(2, { timeout: 20_000 });
    await expectSameDocument(page);
    expect(received).toEqual(['PIPELINE_FAILED', 'PIPELINE_FAILED', 'PIPELINE_COMPLETED']);

    await hydrated(page, '/deliveries');
    await expect(page.locator('.deliveries tbody tr')).toHaveCount(2);
    await shot(page, 'deliveries');
  } finally {
    receiver.close();
  }
});

test('cancelling a running task asks first, then kills it', async ({ page, request }) => {
  const id = await submit(request, {
    name: 'e2e-cancel',
    tasks: [{ name: 'long', target: 'db/cancel', command: { argv: ['sleep', '60'] } }],
  });
  await hydrated(page, `/plans/${id}`);
  const row = taskRow(page, 'long');
  await expect(row).toHaveAttribute('data-status', 'RUNNING', { timeout: 20_000 });
  await row.locator('summary[data-confirm="task_cancel"]').click();
  await row.locator('button[data-action="task_cancel"]').click();
  await expect(row).toHaveAttribute('data-status', 'CANCELED', { timeout: 10_000 });
  await expect(page.locator('#action-result')).toContainText('canceled');
});

test('a task blocked by a busy target says what it waits for', async ({ page, request }) => {
  const id = await submit(request, {
    name: 'e2e-busy',
    tasks: [
      { name: 'holder', target: 'db/busy', command: { argv: ['sleep', '30'] } },
      { name: 'waiter', target: 'db/busy', sleep: '0s' },
    ],
  });
  await hydrated(page, `/plans/${id}`);
  await expect(taskRow(page, 'holder')).toHaveAttribute('data-status', 'RUNNING', { timeout: 20_000 });
  const cause = taskRow(page, 'waiter').locator('.waiting-cause');
  await expect(cause).toContainText(/db\/busy is busy with run #\d+/);
  await shot(page, 'plan-waiting');
  // The overview lists what is live now.
  await hydrated(page, '/');
  await expect(page.locator('[data-count="RUNNING"] .text-2xl')).not.toHaveText('0');
  await shot(page, 'overview');
  await request.post(`/api/v1/plans/${id}/cancel`);
});

test('the plans list filters, searches and links to each plan', async ({ page }) => {
  await hydrated(page, '/plans');
  await expect(page.locator('#plans')).toContainText('e2e-release');
  await shot(page, 'plans');
  await markDocument(page);
  await page.fill('#plan-search', 'FLAKY');
  await page.click('#plan-filter button[type=submit]');
  await expect(page).toHaveURL(/q=FLAKY/);
  await expect(page.locator('#plans tbody tr')).toHaveCount(1);
  await expect(page.locator('#plans')).toContainText('e2e-flaky');
  await page.selectOption('#plan-status-filter', 'FAILED');
  await page.click('#plan-filter button[type=submit]');
  await expect(page.locator('#plans-empty')).toBeVisible();
  await expectSameDocument(page);
  await hydrated(page, '/replicas');
  await shot(page, 'replicas');
});

test('without JavaScript, forms still submit and actions still apply', async ({ browser, request }) => {
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  try {
    const before = await planCount(request);
    await page.goto('/plans/new');
    await page.fill('#plan-text', '{"name": "", "tasks": []}');
    await page.click('#submit-form button[type=submit]');
    await expect(page.locator('#plan-error [role=alert]')).toContainText('name');
    expect(await planCount(request)).toBe(before);

    await page.fill(
      '#plan-text',
      'name: e2e-no-js\ntasks:\n  - name: long\n    target: db/nojs\n    command: {argv: [sleep, "60"]}\n',
    );
    await page.click('#submit-form button[type=submit]');
    await expect(page).toHaveURL(/\/plans\/\d+$/);
    await expect(page.locator('#plan-name')).toHaveText('e2e-no-js');
    const row = taskRow(page, 'long');
    await expect(async () => {
      await page.reload();
      await expect(row).toHaveAttribute('data-status', 'RUNNING', { timeout: 500 });
    }).toPass({ timeout: 20_000 });
    await row.locator('summary[data-confirm="task_cancel"]').click();
    await row.locator('button[data-action="task_cancel"]').click();
    // Back on the plan page (leptos leaves an empty `?` where it strips
    // the error parameters).
    await expect(page).toHaveURL(/\/plans\/\d+\??$/);
    // The replica confirms the kill a moment later: until then the run
    // holds its target and says "canceling", and Cancel is spent.
    const status = await row.getAttribute('data-status');
    if (status === 'RUNNING') {
      await expect(row.locator('.canceling')).toHaveText('canceling');
      await expect(row.locator('button[data-action="task_cancel"]')).toBeDisabled();
    }
    await expect(async () => {
      await page.reload();
      await expect(row).toHaveAttribute('data-status', 'CANCELED', { timeout: 500 });
    }).toPass({ timeout: 10_000 });
  } finally {
    await context.close();
  }
});

test('a hidden tab stops refreshing and catches up when shown again', async ({ page }) => {
  // Let the test decide what `document.hidden` says.
  await page.addInitScript(() => {
    Object.defineProperty(document, 'hidden', { get: () => (window as any).__hidden === true });
  });
  const setHidden = (hidden: boolean) =>
    page.evaluate((hidden) => {
      (window as any).__hidden = hidden;
      document.dispatchEvent(new Event('visibilitychange'));
    }, hidden);
  // The page follows its live feed (one request per connection) and
  // polls nothing while the feed works.
  const feeds: string[] = [];
  const polls: string[] = [];
  page.on('request', (req) => {
    if (req.url().includes('/live/')) feeds.push(req.url());
    if (req.url().includes('/_fn/')) polls.push(req.url());
  });
  await hydrated(page, '/');
  await expect.poll(() => feeds.length, { timeout: 10_000 }).toBe(1);
  await setHidden(true);
  await page.waitForTimeout(5_000); // two and a half of the old refresh periods
  expect(feeds.length).toBe(1);
  await setHidden(false);
  // Shown again: a new connection, whose first message is the current view.
  await expect.poll(() => feeds.length, { timeout: 5_000 }).toBe(2);
  expect(polls).toEqual([]);
});

test('an unknown plan or run is a 404 page', async ({ page, request }) => {
  expect((await request.get('/plans/999999')).status()).toBe(404);
  expect((await request.get('/runs/999999')).status()).toBe(404);
  expect((await request.get('/no/such/page')).status()).toBe(404);
  await page.goto('/plans/999999');
  await expect(page.locator('#not-found')).toContainText('plan 999999 does not exist');
  await shot(page, 'not-found');
});

test('the layout holds on a 390 px phone', async ({ browser }) => {
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true });
  const page = await context.newPage();
  try {
    await hydrated(page, '/');
    // Nothing but the tables' own scrollers may be wider than the screen.
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(overflow).toBeLessThanOrEqual(0);
    await shot(page, 'overview-phone');
  } finally {
    await context.close();
  }
});
