import { expect, test, type APIRequestContext, type Page } from '@playwright/test';

async function submitPlan(request: APIRequestContext, name: string) {
  const res = await request.post('/api/v1/plans', {
    data: { name, tasks: [{ name: 't1', target: 'db/e2e', sleep: '0s' }] },
  });
  expect(res.status(), await res.text()).toBe(201);
}

/** Console errors and uncaught exceptions, which hydration bugs show up as. */
function collectErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on('console', (msg) => {
    if (msg.type() === 'error') errors.push(`console: ${msg.text()}`);
  });
  page.on('pageerror', (err) => errors.push(`pageerror: ${err.message}`));
  return errors;
}

test('plans are rendered on the server, then hydrated and kept live', async ({ page, request }) => {
  await submitPlan(request, 'e2e-hydration');

  // The server's HTML already holds the plan; hydration has not happened.
  const html = await (await request.get('/plans')).text();
  expect(html).toContain('e2e-hydration');
  expect(html).not.toContain('data-hydrated');

  const errors = collectErrors(page);
  await page.goto('/plans');
  await expect(page.locator('#baton')).toHaveAttribute('data-hydrated', 'true');
  await expect(page.locator('#plans')).toContainText('e2e-hydration');

  // Live refresh: a plan submitted now appears without a reload (a reload
  // would drop this marker).
  await page.evaluate(() => ((window as any).__sameDocument = true));
  await submitPlan(request, 'e2e-live');
  await expect(page.locator('#plans')).toContainText('e2e-live', { timeout: 10_000 });

  // Once hydrated, the filter form navigates inside the page.
  await page.fill('#plan-search', 'no-such-plan');
  await page.click('#plan-filter button[type=submit]');
  await expect(page).toHaveURL(/q=no-such-plan/);
  await expect(page.locator('#plans-empty')).toBeVisible();
  await page.fill('#plan-search', '');
  await page.click('#plan-filter button[type=submit]');
  await expect(page.locator('#plans')).toContainText('e2e-hydration');

  expect(await page.evaluate(() => (window as any).__sameDocument)).toBe(true);
  expect(errors).toEqual([]);
});

test('without the wasm bundle the page renders but never hydrates', async ({ page }) => {
  await page.route('**/*.wasm', (route) => route.abort());
  await page.goto('/plans');
  await expect(page.locator('#plans, #plans-empty')).toBeVisible();
  // Longer than a hydrated page takes to set the marker (well under 1 s).
  await page.waitForTimeout(3_000);
  await expect(page.locator('#baton')).not.toHaveAttribute('data-hydrated', 'true');
});
