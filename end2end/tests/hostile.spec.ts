import { expect, test, type Page } from '@playwright/test';

// Names and output an attacker controls must render as text on every page
// that shows them: a plan named `x</title><script>…` once ran its script on
// its page, through the server-rendered <title>.
const PLAN = `x</title><script>window.__pwned='plan'</script><title>`;
const TASK = `<img src=x onerror="window.__pwned='task'">`;
const TARGET = `"><script>window.__pwned='target'</script>`;
const OUTPUT = `<script>window.__pwned='output'</script>`;
const STAGE = `</th><script>window.__pwned='stage'</script>`;

function collectErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on('console', (msg) => {
    if (msg.type() === 'error') errors.push(`console: ${msg.text()}`);
  });
  page.on('pageerror', (err) => errors.push(`pageerror: ${err.message}`));
  return errors;
}

test('hostile plan, task and output text renders as text on every page', async ({ page, request }) => {
  const res = await request.post('/api/v1/plans', {
    data: {
      name: PLAN,
      stages: [{ name: STAGE }],
      tasks: [
        {
          name: TASK,
          stage: STAGE,
          target: TARGET,
          command: { argv: ['sh', '-c', `printf '%s\\n' "$0"`, OUTPUT] },
        },
        // Fails, so the overview lists the plan and target among failures;
        // it runs after TASK, so the plan page names TASK as a dependency
        // and draws both in its graph.
        {
          name: 'fails',
          stage: STAGE,
          target: TARGET,
          exclusive: false,
          depends_on: [TASK],
          command: { argv: ['false'] },
        },
      ],
    },
  });
  expect(res.status(), await res.text()).toBe(201);
  const plan = await res.json();
  const planId: number = plan.id;
  await expect
    .poll(async () => (await (await request.get(`/api/v1/plans/${planId}`)).json()).status, {
      timeout: 20_000,
    })
    .toBe('FAILED');
  const tasks: { name: string; run_id: number }[] = (await (await request.get(`/api/v1/plans/${planId}`)).json())
    .tasks;
  const runId = tasks.find((t) => t.name === TASK)!.run_id;
  // Paused, the target is listed on the targets page with nothing live.
  const paused = await request.post('/api/v1/targets/pause', { data: { target: TARGET } });
  expect(paused.status(), await paused.text()).toBe(200);

  const errors = collectErrors(page);
  const pages: [string, string[], string | null][] = [
    ['/', [PLAN, TARGET], null],
    ['/plans', [PLAN], null],
    [`/plans/${planId}`, [PLAN, TASK, TARGET, STAGE], `${PLAN} · Baton`],
    [`/runs/${runId}`, [TASK, TARGET, OUTPUT], `${TASK} attempt 1 · Baton`],
    ['/targets', [TARGET], null],
  ];
  for (const [url, texts, title] of pages) {
    const response = await page.goto(url);
    const headers = response!.headers();
    expect(headers['content-security-policy'], url).toContain("'nonce-");
    expect(headers['content-security-policy'], url).not.toContain("script-src 'self' 'unsafe-inline'");
    expect(headers['x-content-type-options'], url).toBe('nosniff');
    expect(headers['x-frame-options'], url).toBe('DENY');
    expect(headers['referrer-policy'], url).toBeTruthy();
    // Hydration runs under that policy: the page's own scripts carry the nonce.
    await expect(page.locator('#baton')).toHaveAttribute('data-hydrated', 'true');
    for (const text of texts) {
      await expect(page.getByText(text, { exact: false }).first(), `${url} shows ${text}`).toBeVisible();
    }
    if (title) expect(await page.title(), url).toBe(title);
    expect(await page.evaluate(() => (window as any).__pwned), url).toBeUndefined();
    // No element the names could have smuggled in exists.
    expect(await page.locator('img[src="x"]').count(), url).toBe(0);
  }
  expect(errors).toEqual([]);
  await request.post('/api/v1/targets/resume', { data: { target: TARGET } });

  // Answers that are not pages allow nothing at all.
  const api = await request.get(`/api/v1/plans/${planId}`);
  expect(api.headers()['content-security-policy']).toContain("default-src 'none'");
  expect(api.headers()['x-content-type-options']).toBe('nosniff');
});
