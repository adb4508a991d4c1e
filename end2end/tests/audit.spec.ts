import { expect, test, type Page } from '@playwright/test';
import fs from 'node:fs';
import path from 'node:path';
import { usersPort } from '../playwright.config';

// The Audit page: the entry a bulk retry leaves, under the operator's
// name and address, and a filter that is the URL. On the server with
// users, so the actor is a real name.

const withUsers = `http://127.0.0.1:${usersPort}`;
const shots = path.resolve(__dirname, '..', '..', 'docs', 'screenshots');
fs.mkdirSync(shots, { recursive: true });
const alice = { Authorization: 'Basic ' + Buffer.from('alice:alice-pw').toString('base64') };

async function signIn(page: Page, name: string, password: string) {
  await page.locator('#login-name').fill(name);
  await page.locator('#login-password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

test.describe.configure({ mode: 'serial' });
test.use({ baseURL: withUsers });

test('a bulk retry through its confirmation leaves one audit entry naming the operator and the count', async ({ page, request }) => {
  const res = await request.post('/api/v1/plans', {
    headers: alice,
    data: {
      name: 'e2e-audit',
      tasks: [{ name: 'breaks', target: 'db/audit', command: { argv: ['sh', '-c', 'exit 5'] } }],
    },
  });
  expect(res.status(), await res.text()).toBe(201);
  const id = (await res.json()).id;
  await expect
    .poll(async () => (await (await request.get(`/api/v1/plans/${id}`, { headers: alice })).json()).status, {
      timeout: 20_000,
    })
    .toBe('FAILED');

  await page.goto('/runs?plan=e2e-audit&status=FAILED');
  await signIn(page, 'alice', 'alice-pw');
  await expect(page).toHaveURL(/\/runs\?plan=e2e-audit&status=FAILED$/);
  await expect(page.locator('#baton')).toHaveAttribute('data-hydrated', 'true');
  await page.locator('#bulk a[data-bulk=retry]').click();
  await expect(page.locator('#bulk-confirm')).toContainText('Retry the 1 run this search matches?');
  await page.locator('#bulk-confirm button[data-bulk-confirm=retry]').click();
  await expect(page.locator('#bulk-result')).toContainText('Retried 1 run.');

  await page.locator('nav').getByRole('link', { name: 'Audit' }).click();
  await expect(page).toHaveURL(`${withUsers}/audit`);
  const newest = page.locator('#audit tbody tr').first();
  await expect(newest).toHaveAttribute('data-action', 'runs.bulk_retry');
  await expect(newest).toContainText('alice');
  await expect(newest).toContainText('127.0.0.1');
  await expect(newest).toContainText('runs status=FAILED plan=e2e-audit');
  await expect(newest).toContainText('1 run');
  // The submit is there too, and its subject is a link to the plan.
  const submitted = page.locator('#audit tbody tr[data-action="plan.submit"]', { hasText: 'e2e-audit' });
  await expect(submitted.locator(`a[href="/plans/${id}"]`)).toBeVisible();
  await page.screenshot({ path: path.join(shots, 'audit.png'), fullPage: true });

  // A filter by action is kept in the URL, and a reload shows the same.
  await page.locator('#audit-action').fill('runs.');
  await page.click('#audit-filter button[type=submit]');
  await expect(page).toHaveURL(/[?&]action=runs\.(&|$)/);
  const rows = page.locator('#audit tbody tr');
  await expect(rows).toHaveCount(1);
  await expect(rows.first()).toHaveAttribute('data-action', 'runs.bulk_retry');
  await page.reload();
  await expect(page.locator('#audit-action')).toHaveValue('runs.');
  await expect(page.locator('#audit tbody tr')).toHaveCount(1);

  // The action is a link to every entry of that action; the actor to
  // everything they did, their sign-in among it.
  await page.goto('/audit?actor=alice&action=auth.');
  await expect(page.locator('#audit tbody tr[data-action="auth.sign_in"]').first()).toContainText('alice');
});

test('a filter that cannot be read is named, and / goes to the search box', async ({ page }) => {
  await page.goto('/audit');
  await signIn(page, 'alice', 'alice-pw');
  await page.goto('/audit?action=sideways');
  await expect(page.locator('main [role=alert]')).toContainText('action: no action starts with `sideways`');
  await page.goto('/audit');
  await expect(page.locator('#baton')).toHaveAttribute('data-hydrated', 'true');
  await page.keyboard.press('/');
  await expect(page.locator('#audit-subject')).toBeFocused();
});
