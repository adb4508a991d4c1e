import { expect, test, type Page } from '@playwright/test';
import { usersPort } from '../playwright.config';

// Signing in, roles and the open-server warning, in a real browser.
// The default server (tests/dashboard.spec.ts) has no users; the one on
// `usersPort` has alice (operator) and victor (viewer).

const withUsers = `http://127.0.0.1:${usersPort}`;
const basic = (name: string, password: string) =>
  'Basic ' + Buffer.from(`${name}:${password}`).toString('base64');

async function hydrated(page: Page, url: string) {
  await page.goto(url);
  await expect(page.locator('#baton')).toHaveAttribute('data-hydrated', 'true');
}

async function signIn(page: Page, name: string, password: string) {
  await page.locator('#login-name').fill(name);
  await page.locator('#login-password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

test.describe.configure({ mode: 'serial' });

test('without users, every page says so and there is nothing to sign in to', async ({ page }) => {
  for (const url of ['/', '/plans', '/plans/new', '/replicas', '/deliveries']) {
    await page.goto(url);
    await expect(page.locator('#open-server'), url).toContainText('No users are configured');
  }
  await expect(page.locator('#session')).toHaveCount(0);
  await hydrated(page, '/login');
  await expect(page.locator('#login-open')).toContainText('nothing to sign in to');
});

test.describe('with users', () => {
  test.use({ baseURL: withUsers });

  test('a viewer signs in, returns to the page asked for, and may not act', async ({ page, context, request }) => {
    // A plan to look at, submitted by the operator through the API.
    const res = await request.post('/api/v1/plans', {
      headers: { Authorization: basic('alice', 'alice-pw') },
      data: {
        name: 'e2e-roles',
        tasks: [{ name: 'later', target: 'db/roles', run_at: '2999-01-01T00:00:00Z', sleep: '0s' }],
      },
    });
    expect(res.status(), await res.text()).toBe(201);
    const plan = (await res.json()).id;

    await page.goto(`/plans/${plan}`);
    await expect(page).toHaveURL(new RegExp(`/login\\?next=/plans/${plan}$`));
    await expect(page.locator('#open-server')).toHaveCount(0);

    await signIn(page, 'victor', 'wrong');
    await expect(page.getByRole('alert')).toContainText('Wrong user name or password');
    await signIn(page, 'victor', 'victor-pw');
    await expect(page).toHaveURL(`${withUsers}/plans/${plan}`);
    await expect(page.locator('#baton')).toHaveAttribute('data-hydrated', 'true');
    await expect(page.locator('#session')).toContainText('victor · viewer');

    // The cookie is out of scripts' reach and stays on this site.
    const cookie = (await context.cookies()).find((c) => c.name === 'baton_session');
    expect(cookie?.httpOnly).toBe(true);
    expect(cookie?.sameSite).toBe('Lax');
    expect(await page.evaluate(() => document.cookie)).not.toContain('baton_session');

    const cancel = page.locator('#tasks tr[data-task-name="later"] button[data-action="task_cancel"]');
    await expect(cancel).toBeDisabled();
    await expect(cancel).toHaveAttribute('title', 'Only operators can do this');
    // No Submit in the menu for a viewer; the form's address still explains.
    const menu = page.getByRole('navigation', { name: 'Main' });
    await expect(menu.getByRole('link', { name: 'Plans' })).toBeVisible();
    await expect(menu.getByRole('link', { name: 'Submit' })).toHaveCount(0);
    await page.goto('/plans/new');
    await expect(page.locator('#submit-viewer')).toContainText('only operators can submit');
    await expect(page.locator('#submit-form')).toHaveCount(0);
  });

  test('an operator submits and cancels under their own name, then signs out', async ({ page }) => {
    await page.goto('/plans/new');
    await expect(page).toHaveURL(/\/login\?next=\/plans\/new$/);
    await signIn(page, 'alice', 'alice-pw');
    await expect(page).toHaveURL(`${withUsers}/plans/new`);
    await expect(page.locator('#baton')).toHaveAttribute('data-hydrated', 'true');
    await expect(page.locator('#session')).toContainText('alice · operator');

    await page
      .locator('#plan-text')
      .fill('name: e2e-operator\ntasks:\n  - {name: later, target: db/op, run_at: "2999-01-01T00:00:00Z", sleep: 0s}\n');
    await page.getByRole('button', { name: 'Submit plan' }).click();
    await expect(page).toHaveURL(/\/plans\/\d+$/);
    const row = page.locator('#tasks tr[data-task-name="later"]');
    await expect(row).toHaveAttribute('data-status', 'PENDING');
    await row.locator('summary[data-confirm="task_cancel"]').click();
    await row.locator('button[data-action="task_cancel"]').click();
    await expect(row).toHaveAttribute('data-status', 'CANCELED', { timeout: 10_000 });

    // The run's history names the operator, not "anonymous".
    await row.locator('a[href^="/runs/"]').first().click();
    await expect(page.locator('#timeline')).toContainText('alice');
    await expect(page.locator('#timeline')).not.toContainText('anonymous');

    await page.getByRole('button', { name: 'Sign out' }).click();
    await expect(page).toHaveURL(`${withUsers}/login`);
    await page.goto('/plans');
    await expect(page).toHaveURL(/\/login\?next=\/plans$/);
  });

  test('after ten wrong passwords a name is paused, and the page says so', async ({ page }) => {
    // Eleven sign-ins, each two page loads and a password hash: on a slow
    // 2-core machine they took 32 s, past the default 30 s.
    test.slow();
    // A distinct `next` each time shows which answer the page is showing.
    for (let i = 0; i < 10; i++) {
      await page.goto(`/login?next=/try-${i}`);
      await signIn(page, 'mallory', `guess-${i}`);
      await expect(page).toHaveURL(new RegExp(`failed=1&next=/try-${i}$`));
      await expect(page.getByRole('alert')).toContainText('Wrong user name or password');
    }
    await page.goto('/login?next=/last');
    await signIn(page, 'mallory', 'one more');
    await expect(page).toHaveURL(/failed=too-many&next=\/last$/);
    await expect(page.getByRole('alert')).toContainText('Too many wrong passwords');
  });
});
