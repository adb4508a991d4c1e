import { expect, test, type APIRequestContext, type Page } from '@playwright/test';
import fs from 'node:fs';
import path from 'node:path';

// The Runs page: a search across plans whose filter is the URL, with
// every run, plan, target and replica a link.

const shots = path.resolve(__dirname, '..', '..', 'docs', 'screenshots');
fs.mkdirSync(shots, { recursive: true });

async function submit(request: APIRequestContext, plan: object): Promise<number> {
  const res = await request.post('/api/v1/plans', { data: plan });
  expect(res.status(), await res.text()).toBe(201);
  return (await res.json()).id;
}

async function hydrated(page: Page, url: string) {
  await page.goto(url);
  await expect(page.locator('#baton')).toHaveAttribute('data-hydrated', 'true');
}

test.describe.configure({ mode: 'serial' });

test('the Runs page finds a failed run by its error, and its links narrow the search', async ({ page, request }) => {
  const id = await submit(request, {
    name: 'e2e-search',
    tasks: [
      { name: 'fine', target: 'db/search-a', sleep: '0s' },
      { name: 'stuck', target: 'db/search-b', command: { argv: ['sh', '-c', 'exit 4'] } },
    ],
  });
  await expect
    .poll(async () => (await (await request.get(`/api/v1/plans/${id}`)).json()).status, { timeout: 20_000 })
    .toBe('FAILED');

  await hydrated(page, '/runs');
  await expect(page.locator('#runs tbody tr').first()).toBeVisible();
  await page.selectOption('#runs-status', 'FAILED');
  await page.fill('#runs-error', 'EXITED WITH CODE 4');
  await page.fill('#runs-plan', 'e2e-SEARCH');
  await page.click('#run-filter button[type=submit]');
  await expect(page).toHaveURL(/status=FAILED/);
  await expect(page).toHaveURL(/plan=e2e-SEARCH/);
  const rows = page.locator('#runs tbody tr');
  await expect(rows).toHaveCount(1);
  await expect(rows.first()).toContainText('stuck #1');
  await expect(rows.first()).toContainText('exited with code 4');
  await page.screenshot({ path: path.join(shots, 'runs.png'), fullPage: true });

  // The URL is the search: reloading it shows the same, filters filled in.
  await page.reload();
  await expect(page.locator('#runs-error')).toHaveValue('EXITED WITH CODE 4');
  await expect(page.locator('#runs tbody tr')).toHaveCount(1);

  // Retry every run the search matches: the count is confirmed first,
  // and the result says how many changed.
  await page.locator('#bulk a[data-bulk=retry]').click();
  await expect(page).toHaveURL(/confirm=retry/);
  await expect(page.locator('#bulk-confirm')).toContainText('Retry the 1 run this search matches?');
  await page.locator('#bulk-confirm button[data-bulk-confirm=retry]').click();
  await expect(page.locator('#bulk-result')).toContainText('Retried 1 run.');
  // With JavaScript the page reads the answer itself and stays where it is.
  await expect(page).toHaveURL(/confirm=retry$/);
  await expect
    .poll(async () => {
      const plan = await (await request.get(`/api/v1/plans/${id}`)).json();
      return plan.tasks.find((t: { name: string }) => t.name === 'stuck').attempt;
    })
    .toBe(2);
  // The target is a link to every run on it.
  await rows.first().locator('a', { hasText: 'db/search-b' }).click();
  await expect(page).toHaveURL(/\/runs\?target=db\/search-b$/);
  // Both attempts ran there, the retry newest first.
  await expect(page.locator('#runs tbody tr')).toHaveCount(2);
  await expect(page.locator('#runs tbody tr').first()).toContainText('stuck #2');
  // The run number opens the run.
  await page.locator('#runs tbody tr').last().locator('a', { hasText: '#' }).first().click();
  await expect(page).toHaveURL(/\/runs\/\d+$/);
  await expect(page.locator('main')).toContainText('exited with code 4');
});

test('a filter that cannot be read is named, and a plain search works without JavaScript', async ({ browser }) => {
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  await page.goto('/runs?since=someday');
  await expect(page.locator('main [role=alert]')).toContainText('since: `someday` is neither a time');
  await page.goto('/runs');
  await page.fill('#runs-target', 'db/search-');
  await page.click('#run-filter button[type=submit]');
  await expect(page).toHaveURL(/target=db%2Fsearch-|target=db\/search-/);
  // fine #1, and stuck's two attempts.
  await expect(page.locator('#runs tbody tr')).toHaveCount(3);
  await context.close();
});

test('without JavaScript, a bulk retry ends on the list with the result line', async ({ browser, request }) => {
  const id = await submit(request, {
    name: 'e2e-nojs-retry',
    tasks: [{ name: 'stuck', target: 'db/nojs-retry', command: { argv: ['sh', '-c', 'exit 6'] } }],
  });
  await expect
    .poll(async () => (await (await request.get(`/api/v1/plans/${id}`)).json()).status, { timeout: 20_000 })
    .toBe('FAILED');
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  try {
    // A relative time: the list the operator comes back to keeps it.
    await page.goto('/runs?status=FAILED&target=db/nojs-retry&since=1h');
    await page.locator('#bulk a[data-bulk=retry]').click();
    await expect(page.locator('#bulk-confirm')).toContainText('Retry the 1 run this search matches?');
    await page.locator('#bulk-confirm button[data-bulk-confirm=retry]').click();
    await expect(page).toHaveURL(/\/runs\?status=FAILED&target=db\/nojs-retry&since=1h&done=retry&changed=1$/);
    await expect(page.locator('#bulk-result')).toHaveText('Retried 1 run.');
    await expect(page.locator('#bulk-confirm')).toHaveCount(0);
    await expect
      .poll(async () => {
        const plan = await (await request.get(`/api/v1/plans/${id}`)).json();
        return plan.tasks[0].attempt;
      })
      .toBe(2);
  } finally {
    await context.close();
  }
});

test('/ goes to the search box: the page\'s own, else the Runs page\'s; never while typing', async ({ page }) => {
  await hydrated(page, '/plans');
  await page.keyboard.press('/');
  await expect(page.locator('#plan-search')).toBeFocused();
  await page.keyboard.type('a/b');
  await expect(page.locator('#plan-search')).toHaveValue('a/b');

  await hydrated(page, '/runs');
  await page.keyboard.press('/');
  await expect(page.locator('#runs-target')).toBeFocused();

  await hydrated(page, '/replicas');
  await page.keyboard.press('/');
  await expect(page).toHaveURL(/\/runs\?focus=search$/);
  await expect(page.locator('#runs-target')).toBeFocused();
});

test('targets and replicas are links to their runs wherever they appear', async ({ page, request }) => {
  const plans = await (await request.get('/api/v1/plans?name=e2e-search')).json();
  const id = plans.plans[0].id;
  await page.goto(`/plans/${id}`);
  const stuck = page.locator('#tasks tr[data-task-name="stuck"]');
  await expect(stuck.locator('a[href="/runs?target=db/search-b"]')).toHaveText('db/search-b');
  const replica = await stuck.locator('a[href^="/runs?replica="]').textContent();
  expect(replica).toBeTruthy();
  await page.goto('/replicas');
  await page.locator(`a[href="/runs?replica=${replica}"]`).first().click();
  await expect(page).toHaveURL(new RegExp(`/runs\\?replica=${replica}$`));
  await expect(page.locator('#runs tbody tr').first()).toContainText(replica!);
  await page.goto(`/runs?target=db/search-b`);
  await page.locator('#runs tbody tr').first().locator('a[href^="/runs/"]').first().click();
  await expect(page.locator('main a[href="/runs?target=db/search-b"]')).toBeVisible();
});
