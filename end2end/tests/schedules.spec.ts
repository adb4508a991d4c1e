import { expect, test, type Page } from '@playwright/test';

// Schedules on the dashboard: the list with each expression in words and
// its next ticks, Trigger, Pause and Resume, the schedule's page with its
// plans, ticks and template, creating and editing from a file, refusals
// at their field — with JavaScript, and as plain forms without it.

function scheduleRow(page: Page, name: string) {
  return page.locator(`#schedules tr[data-schedule="${name}"]`);
}

async function hydrated(page: Page, url: string) {
  await page.goto(url);
  await expect(page.locator('#baton')).toHaveAttribute('data-hydrated', 'true');
}

test.describe.configure({ mode: 'serial' });

test('a schedule created from the form shows its words, next ticks and actions; Trigger makes a plan', async ({
  page,
}) => {
  await hydrated(page, '/schedules');
  // An unknown zone is answered at its field, and nothing is stored.
  await page.locator('#schedule-file').fill(
    'name: e2e-nightly\ncron: "30 2 * * *"\ntime_zone: Europe/Berln\nplan: {name: "n ${date}", tasks: [{name: a, target: e2e/sched, sleep: 0s}]}',
  );
  await page.getByRole('button', { name: 'Create schedule' }).click();
  await expect(page.locator('#schedule-error [data-field="time_zone"]')).toBeVisible();
  await expect(page.locator('#schedules-empty')).toBeVisible();

  await page.locator('#schedule-file').fill(
    'name: e2e-nightly\ncron: "30 2 * * *"\ntime_zone: Europe/Berlin\nplan: {name: "n ${date}", tasks: [{name: a, target: e2e/sched, sleep: 0s}]}',
  );
  await page.getByRole('button', { name: 'Create schedule' }).click();
  await expect(page).toHaveURL(/\/schedules\/\d+$/);
  await expect(page.locator('#schedule-name')).toHaveText('e2e-nightly');
  await expect(page.locator('.next-ticks li')).toHaveCount(5);
  await expect(page.locator('#schedule-template')).toContainText('n ${date}');

  await hydrated(page, '/schedules');
  const row = scheduleRow(page, 'e2e-nightly');
  await expect(row.locator('.schedule-words')).toContainText('Europe/Berlin');
  await expect(row.locator('.next-ticks li')).toHaveCount(5);
  // In the reader's zone once hydrated, and named (the browsers here run
  // in UTC): not a bare time beside the schedule's "(Europe/Berlin)".
  const tick = row.locator('.next-ticks li').first();
  await expect(tick).not.toHaveText(/^\d{4}-\d{2}-\d{2} /); // the server's UTC, rewritten
  await expect(tick).toHaveText(/(UTC|GMT)/);
  await row.getByRole('button', { name: 'Trigger now schedule e2e-nightly' }).click();
  await expect(page.locator('#action-result')).toContainText('made and started');
  await expect(row.locator('.recent-plans a')).toHaveCount(1);

  await row.getByRole('button', { name: 'Pause schedule e2e-nightly' }).click();
  await expect(row).toHaveAttribute('data-paused', 'true');
  await expect(row.locator('.paused-by')).toContainText('by anonymous');
  await row.getByRole('button', { name: 'Resume schedule e2e-nightly' }).click();
  await expect(row).toHaveAttribute('data-paused', 'false');
});

test("a schedule's page edits it, lists its plans and deletes it, keeping the plans", async ({ page }) => {
  await hydrated(page, '/schedules');
  await scheduleRow(page, 'e2e-nightly').getByRole('link', { name: 'e2e-nightly' }).click();
  await expect(page.locator('#schedule-plans tr[data-plan]')).toHaveCount(1);
  const plan = await page.locator('#schedule-plans tr[data-plan]').getAttribute('data-plan');
  const file = await page.locator('#schedule-file').inputValue();
  expect(file).toContain('"cron": "30 2 * * *"');
  await page.locator('#schedule-file').fill(file.replace('30 2 * * *', '15 * * * *'));
  await page.getByRole('button', { name: 'Save schedule' }).click();
  await expect(page.locator('header code')).toHaveText('15 * * * *');

  await page.getByRole('button', { name: 'Delete schedule e2e-nightly' }).click();
  await expect(page).toHaveURL(/\/schedules$/);
  await expect(page.locator('#schedules-empty')).toBeVisible();
  const res = await page.request.get(`/api/v1/plans/${plan}`);
  expect(res.status()).toBe(200);
});

test('without JavaScript, creating, triggering and pausing work as form posts', async ({ browser }) => {
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  await page.goto('/schedules');
  await page.locator('#schedule-file').fill(
    'name: e2e-nojs\ncron: "@daily"\nplan: {name: "nojs", tasks: [{name: a, target: e2e/nojs, sleep: 0s}]}',
  );
  await page.getByRole('button', { name: 'Create schedule' }).click();
  await expect(page).toHaveURL(/\/schedules\/\d+$/);
  await expect(page.locator('.next-ticks li')).toHaveCount(5);
  // UTC without JavaScript: the server cannot know the reader's zone.
  await expect(page.locator('.next-ticks li').first()).toContainText('UTC');
  await page.getByRole('button', { name: 'Trigger now schedule e2e-nojs' }).click();
  // The form post lands back on the schedule's page, now with the plan.
  await expect(page.locator('#schedule-plans tr[data-plan]')).toHaveCount(1);
  await page.goto('/schedules');
  const row = scheduleRow(page, 'e2e-nojs');
  await expect(row.locator('.recent-plans a')).toHaveCount(1);
  await row.getByRole('button', { name: 'Pause schedule e2e-nojs' }).click();
  await expect(scheduleRow(page, 'e2e-nojs')).toHaveAttribute('data-paused', 'true');
  await context.close();
});
