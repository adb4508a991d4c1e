import { expect, test, type APIRequestContext, type Page } from '@playwright/test';
import { usersPort } from '../playwright.config';

// Retry all, Cancel all from the filtered Plans list: the confirmation
// counts the runs and the plans, the result says how many changed, the
// audit log names the operator and the filter; and the same works as
// plain links and a form without JavaScript.

const withUsers = `http://127.0.0.1:${usersPort}`;
const alice = { Authorization: 'Basic ' + Buffer.from('alice:alice-pw').toString('base64') };

async function submit(request: APIRequestContext, plan: object, headers = {}): Promise<number> {
  const res = await request.post('/api/v1/plans', { headers, data: plan });
  expect(res.status(), await res.text()).toBe(201);
  return (await res.json()).id;
}

async function planStatus(request: APIRequestContext, id: number, headers = {}): Promise<string> {
  return (await (await request.get(`/api/v1/plans/${id}`, { headers })).json()).status;
}

async function signIn(page: Page, name: string, password: string) {
  await page.locator('#login-name').fill(name);
  await page.locator('#login-password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

test.describe.configure({ mode: 'serial' });

test.describe('with users', () => {
  test.use({ baseURL: withUsers });

  test('Retry all from the filtered Plans list asks with the count, retries, and leaves an audit entry', async ({ page, request }) => {
    const failing = (name: string) => ({
      name,
      tasks: [
        { name: 'breaks', target: `db/${name}`, command: { argv: ['sh', '-c', 'exit 5'] } },
        { name: 'fine', target: `svc/${name}`, sleep: '0s' },
      ],
    });
    const ids: number[] = [];
    for (const name of ['e2e-pbulk-eu', 'e2e-pbulk-us']) {
      ids.push(await submit(request, failing(name), alice));
    }
    for (const id of ids) {
      await expect.poll(() => planStatus(request, id, alice), { timeout: 20_000 }).toBe('FAILED');
    }

    await page.goto('/plans?status=FAILED&q=e2e-pbulk');
    await signIn(page, 'alice', 'alice-pw');
    await expect(page).toHaveURL(/\/plans\?status=FAILED&q=e2e-pbulk$/);
    await expect(page.locator('#baton')).toHaveAttribute('data-hydrated', 'true');
    await expect(page.locator('#plans tbody tr')).toHaveCount(2);
    await page.locator('#bulk a[data-bulk=retry]').click();
    await expect(page).toHaveURL(/confirm=retry/);
    await expect(page.locator('#bulk-confirm')).toContainText(
      'Retry the 2 failed or canceled runs in 2 plans this list matches?',
    );
    await page.locator('#bulk-confirm button[data-bulk-confirm=retry]').click();
    await expect(page.locator('#bulk-result')).toContainText('Retried 2 runs.');
    for (const id of ids) {
      await expect
        .poll(async () => {
          const plan = await (await request.get(`/api/v1/plans/${id}`, { headers: alice })).json();
          return plan.tasks.find((t: { name: string }) => t.name === 'breaks').attempt;
        })
        .toBe(2);
    }

    await page.locator('nav').getByRole('link', { name: 'Audit' }).click();
    await expect(page).toHaveURL(`${withUsers}/audit`);
    const newest = page.locator('#audit tbody tr').first();
    await expect(newest).toHaveAttribute('data-action', 'plans.bulk_retry');
    await expect(newest).toContainText('alice');
    await expect(newest).toContainText('plans status=FAILED name=e2e-pbulk');
    await expect(newest).toContainText('2 runs');
  });

  test('a viewer sees the bulk bar disabled', async ({ page }) => {
    await page.goto('/plans?status=FAILED&q=e2e-pbulk&confirm=retry');
    await signIn(page, 'victor', 'victor-pw');
    await expect(page.locator('#bulk button[data-bulk=retry]')).toBeDisabled();
    await expect(page.locator('#bulk-confirm')).toHaveCount(0);
  });
});

test('Cancel all works as links and a form without JavaScript', async ({ browser, request }) => {
  const id = await submit(request, {
    name: 'e2e-pbulk-nojs',
    tasks: [{ name: 'long', target: 'db/pbulk-nojs', command: { argv: ['sleep', '60'] } }],
  });
  await expect.poll(() => planStatus(request, id), { timeout: 20_000 }).toBe('RUNNING');
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  try {
    await page.goto('/plans?q=e2e-pbulk-nojs');
    await page.locator('#bulk a[data-bulk=cancel]').click();
    await expect(page).toHaveURL(/confirm=cancel/);
    await expect(page.locator('#bulk-confirm')).toContainText('Cancel the 1 live run in 1 plan this list matches?');
    await page.locator('#bulk-confirm button[data-bulk-confirm=cancel]').click();
    // Back on the list, no longer asking, and the result line says how
    // many changed, as it does with JavaScript.
    await expect(page).toHaveURL(/\/plans\?q=e2e-pbulk-nojs&done=cancel&changed=1$/);
    await expect(page.locator('#bulk-result')).toHaveText('Canceled 1 run.');
    await expect(page.locator('#bulk-confirm')).toHaveCount(0);
    // The result stays out of the links it offers.
    await expect(page.locator('#bulk a[data-bulk=cancel]')).toHaveAttribute('href', '/plans?confirm=cancel&q=e2e-pbulk-nojs');
    await expect.poll(() => planStatus(request, id), { timeout: 10_000 }).toBe('CANCELED');
  } finally {
    await context.close();
  }
});

test('without JavaScript, a refusal shows its message where the result would be', async ({ browser, request }) => {
  const id = await submit(request, {
    name: 'e2e-pbulk-moved',
    tasks: [{ name: 'long', target: 'db/pbulk-moved', command: { argv: ['sleep', '60'] } }],
  });
  await expect.poll(() => planStatus(request, id), { timeout: 20_000 }).toBe('RUNNING');
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  try {
    await page.goto('/plans?q=e2e-pbulk-moved&confirm=cancel');
    await expect(page.locator('#bulk-confirm')).toContainText('Cancel the 1 live run in 1 plan this list matches?');
    // Another plan joins the list after the count was shown.
    const other = await submit(request, {
      name: 'e2e-pbulk-moved-too',
      tasks: [{ name: 'long', target: 'db/pbulk-moved-too', command: { argv: ['sleep', '60'] } }],
    });
    await expect.poll(() => planStatus(request, other), { timeout: 20_000 }).toBe('RUNNING');
    await page.locator('#bulk-confirm button[data-bulk-confirm=cancel]').click();
    await expect(page.locator('#bulk-result [role=alert]')).toContainText('the filter now matches 2');
    await expect(page.locator('#bulk-result [role=alert]')).toContainText('you saw 1');
    // The message is the server's own: its link is signed, and the same
    // link without the signature (as anyone could write one) shows no
    // message, only the page.
    const signed = new URL(page.url());
    expect(signed.searchParams.get('__err')).toBeTruthy();
    expect(signed.searchParams.get('__errsig')).toMatch(/^[0-9a-f]{64}$/);
    const forged = await context.newPage();
    for (const tamper of [
      (u: URL) => u.searchParams.delete('__errsig'),
      (u: URL) => u.searchParams.set('__errsig', '0'.repeat(64)),
    ]) {
      const link = new URL(signed);
      tamper(link);
      await forged.goto(link.pathname + link.search);
      await expect(forged).not.toHaveURL(/__err/);
      await expect(forged.locator('#bulk-confirm')).toBeVisible();
      await expect(forged.locator('#bulk-result [role=alert]')).toHaveCount(0);
    }
    await forged.close();
    // Nothing changed, and the question is asked again with the new count.
    await expect(page.locator('#bulk-confirm')).toContainText('Cancel the 2 live runs in 2 plans this list matches?');
    expect(await planStatus(request, id)).toBe('RUNNING');
    await page.locator('#bulk-confirm button[data-bulk-confirm=cancel]').click();
    await expect(page.locator('#bulk-result')).toHaveText('Canceled 2 runs.');
    await expect(page).not.toHaveURL(/__err|confirm=/);
  } finally {
    await context.close();
  }
});

test('a result written into a link shows as text, or not at all', async ({ browser, page: hydrated }) => {
  // The page hydrates over the line it was served with.
  await hydrated.goto('/plans?q=e2e-pbulk&done=retry&changed=3');
  await expect(hydrated.locator('#baton')).toHaveAttribute('data-hydrated', 'true');
  await expect(hydrated.locator('#bulk-result')).toHaveText('Retried 3 runs.');

  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  try {
    await page.goto('/plans?q=e2e-pbulk&done=retry&changed=3');
    await expect(page.locator('#bulk-result')).toHaveText('Retried 3 runs.');
    for (const query of [
      'done=%3Cb%3Eretry%3C%2Fb%3E&changed=3',
      'done=retry&changed=3%3Cscript%3Ealert(1)%3C%2Fscript%3E',
      'done=retry&changed=99999999',
    ]) {
      await page.goto(`/plans?q=e2e-pbulk&${query}`);
      await expect(page.locator('#plans tbody tr').first()).toBeVisible();
      await expect(page.locator('#bulk-result')).toHaveText('');
    }
  } finally {
    await context.close();
  }
});
