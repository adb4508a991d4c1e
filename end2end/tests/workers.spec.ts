import { expect, test, type APIRequestContext, type Page } from '@playwright/test';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';

// A real `baton agent` beside the test server (open, on loopback: no
// token needed), seen and steered from the Replicas page.
const root = path.resolve(__dirname, '..', '..');
const baton = `${root}/target/debug/baton`;
const port = Number(process.env.BATON_E2E_PORT ?? 3917);
const shots = path.join(root, 'docs', 'screenshots');
const LABEL = 'e2e-agent-box';
fs.mkdirSync(shots, { recursive: true });

async function hydrated(page: Page, url: string) {
  await page.goto(url);
  await expect(page.locator('#baton')).toHaveAttribute('data-hydrated', 'true');
}

async function submit(request: APIRequestContext, plan: object): Promise<number> {
  const res = await request.post('/api/v1/plans', { data: plan });
  expect(res.status(), await res.text()).toBe(201);
  return (await res.json()).id;
}

async function task(request: APIRequestContext, plan: number) {
  const res = await request.get(`/api/v1/plans/${plan}`);
  expect(res.status()).toBe(200);
  return (await res.json()).tasks[0];
}

function startAgent(): ChildProcess {
  return spawn(
    baton,
    ['agent', '--server', `http://127.0.0.1:${port}`, '--labels', LABEL, '--workers', '1'],
    { stdio: 'ignore', env: { ...process.env, BATON_LOG: 'warn' } },
  );
}

test('an agent shows on the Replicas page; Drain holds its pinned work back and Resume lets it run', async ({
  page,
  request,
}) => {
  const agent = startAgent();
  try {
    await hydrated(page, '/replicas');
    const row = page.locator(`#replicas tbody tr[data-kind="agent"]`).filter({ hasText: LABEL });
    await expect(row).toHaveCount(1, { timeout: 15_000 });
    await expect(row).toHaveAttribute('data-alive', 'true');
    await expect(row).toHaveAttribute('data-draining', 'false');
    await expect(row).toContainText('agent');
    const agentId = (await row.getAttribute('data-replica-id')) ?? '';
    expect(agentId).toMatch(/^a-/);

    await row.locator('button[data-action="drain"]').click();
    await expect(page.locator('#action-result')).toContainText(`${agentId} is draining`);
    await expect(row).toHaveAttribute('data-draining', 'true');
    await expect(row.locator('[data-draining-by]')).toHaveAttribute('data-draining-by', 'anonymous');
    await page.screenshot({ path: path.join(shots, 'replicas-agent-draining.png'), fullPage: true });
    // The leader reads live labels at most a heartbeat (1 s) apart: a run
    // promoted in that moment would wait AVAILABLE instead, untaken too.
    await page.waitForTimeout(2000);

    // Work only the agent may run waits while it drains, and the cause
    // says no live worker carries its label (its heartbeat still comes).
    const plan = await submit(request, {
      name: 'e2e-drained-agent',
      tasks: [{ name: 'on-the-box', target: 'e2e/agent', node: LABEL, sleep: '100ms' }],
    });
    await expect(async () => {
      const t = await task(request, plan);
      expect(t.status).toBe('PENDING');
      expect(t.waiting_cause ?? '').toContain(LABEL);
    }).toPass({ timeout: 10_000 });
    // Several heartbeats later it still has not been taken.
    await page.waitForTimeout(1500);
    expect((await task(request, plan)).status).toBe('PENDING');

    await row.locator('button[data-action="resume"]').click();
    await expect(page.locator('#action-result')).toContainText(`${agentId} takes runs again`);
    await expect(row).toHaveAttribute('data-draining', 'false');
    await expect(async () => {
      const t = await task(request, plan);
      expect(t.status).toBe('DONE');
      expect(t.replica_id).toBe(agentId);
    }).toPass({ timeout: 15_000 });

    // Draining what does not exist is refused by name, changing nothing.
    const missing = await request.post('/api/v1/replicas/a-nobody-00000000/drain');
    expect(missing.status()).toBe(404);
    expect((await missing.json()).error).toContain('a-nobody-00000000');
  } finally {
    agent.kill('SIGTERM');
    await once(agent, 'exit');
  }
  // A stopped agent says goodbye: its row is gone.
  await expect(async () => {
    const listed = await (await request.get('/api/v1/replicas')).json();
    expect(listed.filter((r: { labels: string[] }) => r.labels.includes(LABEL))).toHaveLength(0);
  }).toPass({ timeout: 10_000 });
});
