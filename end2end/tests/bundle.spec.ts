import { expect, test } from '@playwright/test';

// The main test server is target/debug/baton copied alone into an empty
// directory with no BATON_SITE_ROOT (playwright.config.ts): whatever the
// pages load must come from inside the binary.

test('the wasm bundle, its JS and the favicon come from inside the binary', async ({ page, request }) => {
  const html = await (await request.get('/')).text();
  const wasm = html.match(/href="(\/pkg\/baton-[0-9a-f]{16}\.wasm)"/)?.[1];
  const js = html.match(/href="(\/pkg\/baton-[0-9a-f]{16}\.js)"/)?.[1];
  expect(wasm, 'the page names a content-hashed wasm file').toBeTruthy();
  expect(js, 'the page names a content-hashed JS file').toBeTruthy();

  for (const [url, type] of [
    [wasm!, 'application/wasm'],
    [js!, 'text/javascript; charset=utf-8'],
  ]) {
    const res = await request.get(url, { headers: { 'accept-encoding': 'br, gzip' } });
    expect(res.status(), url).toBe(200);
    expect(res.headers()['content-type']).toBe(type);
    expect(res.headers()['cache-control']).toBe('public, max-age=31536000, immutable');
    expect((await res.body()).length).toBeGreaterThan(1000);
  }
  // The wasm really is wasm once decoded (magic number \0asm).
  const body = await (await request.get(wasm!)).body();
  expect([...body.subarray(0, 4)]).toEqual([0, 0x61, 0x73, 0x6d]);

  const icon = await request.get('/favicon.svg');
  expect(icon.status()).toBe(200);
  expect(icon.headers()['content-type']).toBe('image/svg+xml');
  const etag = icon.headers()['etag'];
  expect(etag).toBeTruthy();
  const again = await request.get('/favicon.svg', { headers: { 'if-none-match': etag } });
  expect(again.status()).toBe(304);

  // And the page hydrates from them.
  await page.goto('/');
  await expect(page.locator('#baton')).toHaveAttribute('data-hydrated', 'true');
});

test('no path reaches the disk beside the binary', async ({ request }) => {
  // The binary sits in a directory of its own, next to nothing else; none
  // of these may serve it, the database or any other file.
  for (const path of [
    '/baton',
    '/pkg/baton.wasm',
    '/pkg/../baton',
    '/%2e%2e/baton',
    '/..%2fbaton.db',
    '/pkg/%2e%2e%2f%2e%2e%2fbaton.db',
    '/etc/passwd',
  ]) {
    const res = await request.get(path);
    // Dot-segment tricks are refused outright (400), the rest are pages
    // that do not exist (404); neither is ever a file.
    expect([400, 404], path).toContain(res.status());
    const body = await res.body();
    expect(body.includes('SQLite format 3'), path).toBe(false);
    expect([...body.subarray(0, 4)], path).not.toEqual([0x7f, 0x45, 0x4c, 0x46]); // ELF
  }
});
