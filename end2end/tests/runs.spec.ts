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

// A word no other test's error holds.
const word = `lockwait${Date.now()}`;

test('the Runs page finds a failed run by its error, and its links narrow the search', async ({ page, request }) => {
  const id = await submit(request, {
    name: 'e2e-search',
    tasks: [
      { name: 'fine', target: 'db/search-a', sleep: '0s' },
      { name: 'stuck', target: 'db/search-b', command: { argv: ['sh', '-c', `echo ${word} >&2; exit 4`] } },
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

  // The target is a link to every run on it.
  await rows.first().locator('a', { hasText: 'db/search-b' }).click();
  await expect(page).toHaveURL(/\/runs\?target=db\/search-b$/);
  await expect(page.locator('#runs tbody tr')).toHaveCount(1);
  // The run number opens the run.
  await page.locator('#runs tbody tr').first().locator('a', { hasText: '#' }).first().click();
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
  await expect(page.locator('#runs tbody tr')).toHaveCount(2);
  await context.close();
});
