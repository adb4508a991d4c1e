import { expect, test, type APIRequestContext, type Page } from '@playwright/test';
import fs from 'node:fs';
import path from 'node:path';

// The workflow gates on the dashboard: stages, dependencies, approvals,
// pausing a plan or a target, and a target's capacity.

const shots = path.resolve(__dirname, '..', '..', 'docs', 'screenshots');
fs.mkdirSync(shots, { recursive: true });

async function shot(page: Page, name: string) {
  await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true });
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

/** A row of the targets page's table. */
function targetRow(page: Page, target: string) {
  return page.locator(`#targets tr[data-target="${target}"]`);
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

/** Reloads a page without JavaScript until `check` passes (it cannot refresh itself). */
async function untilReloaded(page: Page, check: () => Promise<void>) {
  await expect(async () => {
    await page.reload();
    await check();
  }).toPass({ timeout: 20_000 });
}

test.describe.configure({ mode: 'serial' });

test('a staged plan shows its stages, its graph and its dependencies; Approve releases the gated stage', async ({
  page,
  request,
}) => {
  const id = await submit(request, {
    name: 'e2e-stages',
    stages: [{ name: 'build' }, { name: 'ship', approval: 'required' }],
    tasks: [
      { name: 'compile', stage: 'build', target: 'ci/e2e-compile', sleep: '1s' },
      { name: 'unit-tests', stage: 'build', target: 'ci/e2e-tests', sleep: '0s' },
      { name: 'deploy', stage: 'ship', target: 'svc/e2e-api', sleep: '0s' },
      { name: 'announce', target: 'chat/e2e', depends_on: ['deploy'], sleep: '0s' },
    ],
  });
  await hydrated(page, `/plans/${id}`);
  await markDocument(page);

  // One group per stage, in the plan's order, then the tasks in none.
  const groups = page.locator('#tasks tbody');
  await expect(groups).toHaveCount(3);
  await expect(groups.nth(0)).toHaveAttribute('data-stage', 'build');
  await expect(groups.nth(1)).toHaveAttribute('data-stage', 'ship');
  await expect(groups.nth(2)).toHaveAttribute('data-stage', '');
  await expect(groups.nth(0).locator('.stage-heading')).toContainText('Stage 1 of 2: build');
  await expect(groups.nth(1).locator('.stage-heading')).toContainText('Stage 2 of 2: ship');
  await expect(groups.nth(1).locator('.stage-approval')).toContainText('needs an approval');
  await expect(groups.nth(2).locator('.stage-heading')).toContainText('Not in a stage');
  await expect(groups.nth(0).locator('tr[data-task-name]')).toHaveCount(2);

  // What each task runs after and before, linked to the rows.
  const deploy = taskRow(page, 'deploy');
  await expect(deploy.locator('.depends-on')).toHaveText('after compile, unit-tests');
  await expect(deploy.locator('.dependents')).toHaveText('before announce');
  await expect(taskRow(page, 'compile').locator('.dependents')).toHaveText('before deploy');
  await expect(taskRow(page, 'announce').locator('.depends-on')).toHaveText('after deploy');
  const compileId = await taskRow(page, 'compile').getAttribute('data-task-id');
  await expect(deploy.locator('.depends-on a').first()).toHaveAttribute('href', `#task-${compileId}`);

  // The graph: a box per task, in columns by depth, each linked to its row.
  const graph = page.locator('#plan-graph');
  await expect(graph.locator('.graph-node')).toHaveCount(4);
  await expect(graph.locator('[data-task-name="compile"]')).toHaveAttribute('data-depth', '0');
  await expect(graph.locator('[data-task-name="deploy"]')).toHaveAttribute('data-depth', '1');
  await expect(graph.locator('[data-task-name="announce"]')).toHaveAttribute('data-depth', '2');
  await expect(graph.locator('svg path')).toHaveCount(2 * 3);

  // Once the build stage is done, deploy waits for its approval alone.
  await expect(deploy.locator('.waiting-cause')).toHaveText('waits for approval', { timeout: 20_000 });
  await expect(deploy.locator('.needs-approval')).toHaveText('needs an approval');
  await expect(taskRow(page, 'announce').locator('.waiting-cause')).toHaveText('waits for deploy (PENDING)');
  await expect(page.locator('#plan-actions button[data-action="plan_approve"]')).toBeEnabled();
  await shot(page, 'plan-stages');

  await deploy.locator('button[data-action="task_approve"]').click();
  await expect(page.locator('#action-result')).toContainText('approved');
  await expect(deploy).toHaveAttribute('data-status', 'DONE', { timeout: 20_000 });
  await expect(deploy).toHaveAttribute('data-approved-by', 'anonymous');
  await expect(deploy.locator('.approved-by')).toContainText('approved by anonymous');
  await expect(deploy.locator('button[data-action="task_approve"]')).toHaveCount(0);
  await expect(groups.nth(1).locator('.stage-approval')).toHaveText('approved by anonymous');
  await expect(taskRow(page, 'announce')).toHaveAttribute('data-status', 'DONE', { timeout: 20_000 });
  await expect(page.locator('#plan-status')).toContainText('DONE');
  await expect(page.locator('#plan-actions button[data-action="plan_approve"]')).toHaveCount(0);
  await expect(page.locator('#plan-actions button[data-action="plan_pause"]')).toBeDisabled();
  await expectSameDocument(page);
});

test('a plan halted behind a failed task says HALTED in its badge and the lists; the run page acts; Skip lets it finish', async ({
  page,
  request,
}) => {
  const id = await submit(request, {
    name: 'e2e-halted',
    tasks: [
      {
        name: 'migrate',
        target: 'db/e2e-halted',
        command: { argv: ['sh', '-c', 'for i in $(seq 1 400); do echo "line $i"; done; echo "ERROR: deadlock detected" >&2; exit 3'] },
      },
      { name: 'deploy', target: 'svc/e2e-halted', depends_on: ['migrate'], sleep: '0s' },
    ],
  });
  await hydrated(page, `/plans/${id}`);
  await markDocument(page);
  await expect(page.locator('#plan-status [data-status]')).toHaveText('HALTED', { timeout: 20_000 });
  await expect(taskRow(page, 'deploy').locator('.waiting-cause')).toHaveText(
    'blocked: dependency migrate FAILED — retry or skip it',
  );
  // Why it failed, where the eye is: the error quotes the last stderr line.
  await expect(taskRow(page, 'migrate').locator('.task-error')).toHaveText(
    'exited with code 3: ERROR: deadlock detected',
  );
  await shot(page, 'plan-halted');

  // The FAILED filter lists it with the HALTED badge; RUNNING does not.
  await hydrated(page, '/plans?status=FAILED&q=e2e-halted');
  await expect(page.locator(`#plans tr[data-plan-id="${id}"] td:nth-child(3) [data-status]`)).toHaveText('HALTED');
  await hydrated(page, '/plans?status=RUNNING&q=e2e-halted');
  await expect(page.locator('#plans-empty')).toBeVisible();

  // The run page opens its log at the newest line and offers the task's buttons.
  const plan = await (await request.get(`/api/v1/plans/${id}`)).json();
  const runId = plan.tasks.find((t: any) => t.name === 'migrate').run_id;
  await hydrated(page, `/runs/${runId}`);
  const log = page.locator('#run-log');
  await expect(log.locator('span', { hasText: 'ERROR: deadlock detected' })).toHaveCount(1);
  // Within the log's own scroll box: the newest line shows, the oldest is scrolled away.
  const seen = await log.evaluate((box) => {
    const frame = box.getBoundingClientRect();
    const lines = box.querySelectorAll('span');
    const inside = (el: Element) => {
      const r = el.getBoundingClientRect();
      return r.top >= frame.top - 1 && r.bottom <= frame.bottom + 1;
    };
    return { scrolls: box.scrollHeight > box.clientHeight, newest: inside(lines[lines.length - 1]), oldest: inside(lines[0]) };
  });
  expect(seen).toEqual({ scrolls: true, newest: true, oldest: false });
  const actions = page.locator('#run-actions');
  await expect(actions.locator('button[data-action="task_cancel"]')).toBeDisabled();
  await shot(page, 'run-page');
  await actions.locator('button[data-action="task_retry"]').click();
  await expect(page.locator('#action-result')).toContainText('retried');

  // The retry fails the same way; Skip lets the plan finish.
  await hydrated(page, `/plans/${id}`);
  await markDocument(page);
  await expect(taskRow(page, 'migrate').locator('td').nth(4)).toHaveText('2', { timeout: 20_000 });
  await expect(page.locator('#plan-status [data-status]')).toHaveText('HALTED', { timeout: 20_000 });
  await taskRow(page, 'migrate').locator('summary[data-confirm="task_skip"]').click();
  await taskRow(page, 'migrate').locator('button[data-action="task_skip"]').click();
  await expect(page.locator('#plan-status [data-status]')).toHaveText('DONE', { timeout: 20_000 });
  await expectSameDocument(page);
});

test('a task shows what it runs, secrets hidden; Submit again makes the same plan from its file, with and without JavaScript', async ({
  page,
  request,
  browser,
}) => {
  const id = await submit(request, {
    name: 'e2e-again',
    tasks: [
      {
        name: 'migrate',
        target: 'db/e2e-again',
        version: '0042',
        max_attempts: 3,
        timeout: '10m',
        command: { argv: ['sh', '-c', 'echo migrating'], env: { PGPASSWORD: 'e2e-s3cret' } },
      },
      { name: 'wait', target: 'svc/e2e-again', depends_on: ['migrate'], sleep: '1s' },
    ],
  });
  await hydrated(page, `/plans/${id}`);
  const migrate = taskRow(page, 'migrate');
  await migrate.locator('details.definition summary').click();
  const definition = migrate.locator('.task-definition');
  await expect(definition).toContainText("sh -c 'echo migrating'");
  await expect(definition).toContainText('PGPASSWORD (values hidden)');
  await expect(definition).toContainText('3, retried after 1s, 2s');
  await expect(definition).toContainText('10m');
  await expect(page.locator('body')).not.toContainText('e2e-s3cret');
  await shot(page, 'task-definition');

  // The run page shows the same definition.
  const plan = await (await request.get(`/api/v1/plans/${id}`)).json();
  const runId = plan.tasks.find((t: any) => t.name === 'migrate').run_id;
  await hydrated(page, `/runs/${runId}`);
  await expect(page.locator('#run-definition .task-definition')).toContainText('PGPASSWORD (values hidden)');

  // Submit again: the form holds the file, secrets included; submitting it makes a new plan.
  await hydrated(page, `/plans/${id}`);
  await page.locator('#submit-again').click();
  await expect(page).toHaveURL(new RegExp(`/plans/new\\?from=${id}$`));
  await expect(page.locator('#submit-copy')).toContainText(`Plan ${id}`);
  await expect(page.locator('#plan-text')).toHaveValue(/e2e-s3cret/);
  await expect(page.locator('#plan-text')).toHaveValue(/'0042'|"0042"/);
  await page.locator('#submit-form button[type="submit"]').click();
  await expect(page).toHaveURL(/\/plans\/\d+$/);
  const again = Number(page.url().split('/').pop());
  expect(again).toBeGreaterThan(id);
  const exported = async (plan: number) => {
    const res = await request.get(`/api/v1/plans/${plan}/export`);
    expect(res.status()).toBe(200);
    return res.json();
  };
  expect(await exported(again)).toEqual(await exported(id));

  // Without JavaScript the copy is in the page as sent, and the form posts.
  const context = await browser.newContext({ javaScriptEnabled: false });
  const plain = await context.newPage();
  await plain.goto(`/plans/new?from=${id}`);
  await expect(plain.locator('#plan-text')).toHaveValue(/e2e-s3cret/);
  await plain.locator('#submit-form button[type="submit"]').click();
  await expect(plain).toHaveURL(/\/plans\/\d+$/);
  const third = Number(plain.url().split('/').pop());
  expect(await exported(third)).toEqual(await exported(id));
  await context.close();
});

test("a running run's log follows its newest line, and stays where the operator scrolled up to", async ({
  page,
  request,
}) => {
  const id = await submit(request, {
    name: 'e2e-log-follow',
    tasks: [
      {
        name: 'chatty',
        target: 'db/e2e-log-follow',
        command: { argv: ['sh', '-c', 'i=0; while [ $i -lt 4000 ]; do i=$((i+1)); echo "line $i"; sleep 0.01; done'] },
      },
    ],
  });
  const task = async () => (await (await request.get(`/api/v1/plans/${id}`)).json()).tasks[0];
  await expect.poll(async () => (await task()).run_id ?? null, { timeout: 20_000 }).not.toBeNull();
  await hydrated(page, `/runs/${(await task()).run_id}`);
  const log = page.locator('#run-log');
  const newest = () => log.evaluate((box) => Number(box.querySelector('span:last-child')!.textContent!.split(' ')[1]));
  // scrollTop is 0 at the newest line of the reversed column, negative above it.
  const offset = () => log.evaluate((box) => box.scrollTop);
  // Whether the newest line shows within the log's own scroll box.
  const newestShown = () =>
    log.evaluate((box) => {
      const frame = box.getBoundingClientRect();
      const last = box.querySelector('span:last-child')!.getBoundingClientRect();
      return last.top >= frame.top - 1 && last.bottom <= frame.bottom + 1;
    });
  await expect.poll(newest, { timeout: 20_000 }).toBeGreaterThan(150);
  // While it runs, its deadlines are ahead of it.
  await expect(page.locator('#run-heartbeat-deadline')).toHaveText(/^in /);
  await expect(page.locator('#run-deadline')).toHaveText(/^in /);

  // Following: new lines arrive and the newest shows.
  let before = await newest();
  await expect.poll(newest, { timeout: 10_000 }).toBeGreaterThan(before);
  expect(await newestShown()).toBe(true);

  // Scrolled to the top, the view stays there as lines keep coming (and
  // the ones above it are cut from the tail).
  const fromTop = () => log.evaluate((box) => box.scrollHeight - box.clientHeight + box.scrollTop);
  await log.evaluate((box) => {
    box.scrollTop = -(box.scrollHeight - box.clientHeight);
  });
  expect(await offset()).toBeLessThan(-100);
  before = await newest();
  await expect.poll(newest, { timeout: 10_000 }).toBeGreaterThan(before);
  expect(await fromTop()).toBeLessThan(40);
  expect(await newestShown()).toBe(false);

  // Back at the newest line, it follows again.
  await log.evaluate((box) => {
    box.scrollTop = 0;
  });
  before = await newest();
  await expect.poll(newest, { timeout: 10_000 }).toBeGreaterThan(before);
  expect(await newestShown()).toBe(true);
  await request.post(`/api/v1/plans/${id}/cancel`);
});

test('the Targets page says where a version line halted and by which run', async ({ page, request }) => {
  const target = 'db/e2e-line';
  const id = await submit(request, {
    name: 'e2e-line',
    tasks: [
      { name: 'v1', target, version: '0001', command: { argv: ['sh', '-c', 'exit 1'] } },
      { name: 'v2', target, version: '0002', sleep: '0s' },
    ],
  });
  await hydrated(page, `/plans/${id}`);
  await expect(page.locator('#plan-status [data-status]')).toHaveText('HALTED', { timeout: 20_000 });
  const plan = await (await request.get(`/api/v1/plans/${id}`)).json();
  const runId = plan.tasks.find((t: any) => t.name === 'v1').run_id;
  await hydrated(page, '/targets');
  const line = page.locator(`tr[data-target="${target}"] .halted-line`);
  await expect(line).toHaveText(`line halted at version 0001 by run #${runId} (FAILED): retry or skip it`);
  await expect(line.locator('a')).toHaveAttribute('href', `/runs/${runId}`);
  // Skipped, the line moves and the note goes.
  await hydrated(page, `/plans/${id}`);
  await taskRow(page, 'v1').locator('summary[data-confirm="task_skip"]').click();
  await taskRow(page, 'v1').locator('button[data-action="task_skip"]').click();
  await expect(page.locator('#plan-status [data-status]')).toHaveText('DONE', { timeout: 20_000 });
  await hydrated(page, '/targets');
  await expect(page.locator(`tr[data-target="${target}"] .halted-line`)).toHaveCount(0);
});

test('the Overview says what needs an operator: a halted line, approvals, pauses, each linked', async ({
  page,
  request,
}) => {
  const target = 'db/e2e-attention-line';
  const paused = 'db/e2e-attention-paused';
  const id = await submit(request, {
    name: 'e2e-attention',
    tasks: [
      { name: 'v1', target, version: '0001', command: { argv: ['sh', '-c', 'exit 1'] } },
      { name: 'v2', target, version: '0002', sleep: '0s' },
      { name: 'gated', target: 'db/e2e-attention-gate', approval: 'required', sleep: '0s' },
    ],
  });
  expect((await request.post('/api/v1/targets/pause', { data: { target: paused } })).status()).toBe(200);
  // v1 fails first; then the plan is paused (its gated task waits on).
  const v1 = async () =>
    (await (await request.get(`/api/v1/plans/${id}`)).json()).tasks.find((t: any) => t.name === 'v1');
  await expect.poll(async () => (await v1()).status, { timeout: 20_000 }).toBe('FAILED');
  const runId = (await v1()).run_id;
  expect((await request.post(`/api/v1/plans/${id}/pause`)).status()).toBe(200);

  await hydrated(page, '/');
  const strip = page.locator('#attention');
  const line = strip.locator('li[data-kind="halted_line"]', { hasText: target });
  await expect(line).toHaveText(`${target}: line halted at version 0001 by run #${runId} (FAILED): retry or skip it`);
  await expect(line.locator('a')).toHaveAttribute('href', `/runs/${runId}`);
  const approval = strip.locator('li[data-kind="approval"]', { hasText: `plan #${id} ` });
  await expect(approval).toHaveText(`plan #${id} e2e-attention: 1 task waits for approval`);
  await expect(approval.locator('a')).toHaveAttribute('href', `/plans/${id}`);
  const pausedPlan = strip.locator('li[data-kind="paused_plan"]', { hasText: `plan #${id} ` });
  await expect(pausedPlan).toHaveText(`plan #${id} e2e-attention paused by anonymous`);
  const pausedTarget = strip.locator('li[data-kind="paused_target"]', { hasText: paused });
  await expect(pausedTarget).toHaveText(`target ${paused} paused by anonymous`);
  await expect(pausedTarget.locator('a')).toHaveAttribute('href', '/targets');
  await shot(page, 'overview-attention');

  // Once the operator acts, the items go, without a reload.
  await request.post('/api/v1/targets/resume', { data: { target: paused } });
  await request.post(`/api/v1/plans/${id}/resume`);
  await request.post(`/api/v1/plans/${id}/cancel`);
  await expect(pausedTarget).toHaveCount(0, { timeout: 20_000 });
  await expect(pausedPlan).toHaveCount(0);
  await expect(approval).toHaveCount(0);
});

test('Pause shows who paused the plan and holds its runs; Resume clears it', async ({ page, request }) => {
  const id = await submit(request, {
    name: 'e2e-pause',
    tasks: [
      { name: 'first', target: 'db/e2e-pause-a', sleep: '0s' },
      { name: 'second', target: 'db/e2e-pause-b', depends_on: ['first'], approval: 'required', sleep: '0s' },
    ],
  });
  await hydrated(page, `/plans/${id}`);
  await markDocument(page);
  const second = taskRow(page, 'second');
  await expect(second.locator('.waiting-cause')).toHaveText('waits for approval', { timeout: 20_000 });
  const banner = page.locator('#plan-paused');
  await expect(banner).toHaveCount(0);

  await page.locator('#plan-actions button[data-action="plan_pause"]').click();
  await expect(page.locator('#action-result')).toContainText('paused');
  await expect(banner).toContainText(
    /^Paused by anonymous at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: no new run of this plan starts/,
  );
  await expect(second.locator('.waiting-cause')).toContainText('plan paused by anonymous');
  await expect(page.locator('#plan-actions button[data-action="plan_pause"]')).toHaveCount(0);
  await shot(page, 'plan-paused');

  await page.locator('#plan-actions button[data-action="plan_resume"]').click();
  await expect(banner).toHaveCount(0);
  await expect(page.locator('#plan-actions button[data-action="plan_pause"]')).toBeEnabled();
  await expect(second.locator('.waiting-cause')).toHaveText('waits for approval');
  await expectSameDocument(page);
  await request.post(`/api/v1/plans/${id}/cancel`);
});

test('the Targets page lists what holds a target; Pause, Resume and capacity apply at once', async ({
  page,
  request,
}) => {
  const target = 'db/e2e-targets';
  const id = await submit(request, {
    name: 'e2e-targets',
    tasks: [
      { name: 'holder', target, command: { argv: ['sleep', '30'] } },
      { name: 'waiter', target, sleep: '0s' },
    ],
  });
  await hydrated(page, `/plans/${id}`);
  const holder = taskRow(page, 'holder');
  await expect(holder).toHaveAttribute('data-status', 'RUNNING', { timeout: 20_000 });
  const runHref = await holder.locator('a').first().getAttribute('href');

  await page.locator('nav[aria-label="Main"] a[href="/targets"]').click();
  await expect(page).toHaveURL(/\/targets$/);
  await markDocument(page);
  const row = targetRow(page, target);
  await expect(row.locator('.holders')).toContainText(/^1 run, first #\d+ \(exclusive\)$/);
  await expect(row.locator('.holders a')).toHaveAttribute('href', runHref!);
  await expect(row.locator('td').nth(2)).toHaveText('1');
  await expect(row).toHaveAttribute('data-paused', 'false');

  await row.locator('button[data-action="pause"]').click();
  await expect(page.locator('#action-result')).toContainText(`Target ${target} paused`);
  await expect(row).toHaveAttribute('data-paused', 'true');
  await expect(row.locator('.paused-by')).toContainText('by anonymous');
  // The waiting run says why, in its own plan.
  await expect
    .poll(async () => {
      const plan = await (await request.get(`/api/v1/plans/${id}`)).json();
      return plan.tasks.find((t: any) => t.name === 'waiter').waiting_cause ?? '';
    })
    .toMatch(new RegExp(`^target ${target.replace(/[/.]/g, '\\$&')} paused by anonymous at \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\dZ$`));
  await shot(page, 'targets');

  await row.locator('button[data-action="resume"]').click();
  await expect(row).toHaveAttribute('data-paused', 'false');
  await expect(row.locator('.paused-by')).toHaveCount(0);

  await row.locator('input[name="capacity"]').fill('2');
  await row.locator('button[data-action="capacity_set"]').click();
  await expect(page.locator('#action-result')).toContainText('at most 2 runs at once');
  await expect(row).toHaveAttribute('data-capacity', '2');
  await expect(row.locator('td').nth(3)).toHaveText('1 of 2 in use');
  await row.locator('button[data-action="capacity_remove"]').click();
  await expect(row).toHaveAttribute('data-capacity', '');
  await expect(page.locator('#action-result')).toContainText('no capacity limit');
  await expectSameDocument(page);
  await request.post(`/api/v1/plans/${id}/cancel`);
});

test('without JavaScript, Pause, Resume, Approve and the target brakes work as form posts', async ({
  browser,
  request,
}) => {
  const target = 'db/e2e-gates-no-js';
  const id = await submit(request, {
    name: 'e2e-gates-no-js',
    tasks: [{ name: 'gated', target, approval: 'required', sleep: '0s' }],
  });
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  try {
    await page.goto(`/plans/${id}`);
    const row = taskRow(page, 'gated');
    await untilReloaded(page, () =>
      expect(row.locator('.waiting-cause')).toHaveText('waits for approval', { timeout: 500 }),
    );

    // Back on the plan page after each post (leptos leaves an empty `?`
    // where it strips the error parameters).
    const planUrl = new RegExp(`/plans/${id}\\??$`);
    await page.locator('#plan-actions button[data-action="plan_pause"]').click();
    await expect(page).toHaveURL(planUrl);
    await expect(page.locator('#plan-paused')).toContainText('Paused by anonymous');
    await page.locator('#plan-actions button[data-action="plan_resume"]').click();
    await expect(page).toHaveURL(planUrl);
    await expect(page.locator('#plan-paused')).toHaveCount(0);

    await page.goto('/targets');
    const trow = targetRow(page, target);
    await trow.locator('button[data-action="pause"]').click();
    await expect(page).toHaveURL(/\/targets\??$/);
    await expect(trow).toHaveAttribute('data-paused', 'true');
    await trow.locator('input[name="capacity"]').fill('3');
    await trow.locator('button[data-action="capacity_set"]').click();
    await expect(trow).toHaveAttribute('data-capacity', '3');
    await trow.locator('button[data-action="resume"]').click();
    await expect(trow).toHaveAttribute('data-paused', 'false');
    await trow.locator('button[data-action="capacity_remove"]').click();
    await expect(trow).toHaveAttribute('data-capacity', '');

    await page.goto(`/plans/${id}`);
    await page.locator('#plan-actions button[data-action="plan_approve"]').click();
    await expect(page).toHaveURL(planUrl);
    await untilReloaded(page, () => expect(row).toHaveAttribute('data-status', 'DONE', { timeout: 500 }));
    await expect(row.locator('.approved-by')).toContainText('approved by anonymous');
  } finally {
    await context.close();
  }
});
