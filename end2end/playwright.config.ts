import { defineConfig, devices } from '@playwright/test';
import path from 'node:path';

// scripts/test.sh builds these first: the debug server and the debug site
// root (a bundle only hydrates pages from a server of the same profile).
const root = path.resolve(__dirname, '..');
const port = Number(process.env.BATON_E2E_PORT ?? 3917);
const dataDir = path.join(root, 'target', 'e2e');
// A second server with users, for the sign-in tests (tests/auth.spec.ts).
export const usersPort = Number(process.env.BATON_E2E_USERS_PORT ?? port + 1);
const usersDir = path.join(root, 'target', 'e2e-users');
const baton = `${root}/target/debug/baton`;

export default defineConfig({
  testDir: './tests',
  // The tests share one server and database; one at a time keeps them honest.
  fullyParallel: false,
  workers: 1,
  forbidOnly: !!process.env.CI,
  retries: 0,
  timeout: 30_000,
  reporter: 'list',
  use: {
    baseURL: `http://127.0.0.1:${port}`,
    trace: 'retain-on-failure',
  },
  projects: [
    {
      name: 'chromium',
      use: {
        ...devices['Desktop Chrome'],
        launchOptions: {
          // Playwright's own browser download fails here; Debian's works.
          executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
          args: [
            '--headless',
            '--no-sandbox',
            '--disable-gpu',
            '--disable-quic',
            '--no-first-run',
            '--disable-background-networking',
            '--disable-component-update',
            '--disable-sync',
          ],
        },
      },
    },
  ],
  webServer: [
    {
      // A fresh SQLite database per run, so earlier runs cannot leak in.
      // The binary runs copied alone into an empty directory, with no
      // BATON_SITE_ROOT: every test below then proves it serves the whole
      // dashboard, hydrated, from inside itself.
      command: [
        `rm -rf '${dataDir}' && mkdir -p '${dataDir}/alone'`,
        `cp '${baton}' '${dataDir}/alone/baton'`,
        `cd '${dataDir}/alone' && exec ./baton serve`,
      ].join(' && '),
      url: `http://127.0.0.1:${port}/healthz`,
      // Never test a server left over from another build.
      reuseExistingServer: false,
      timeout: 60_000,
      stdout: 'pipe',
      stderr: 'pipe',
      env: {
        BATON_LISTEN: `127.0.0.1:${port}`,
        BATON_DATABASE_URL: `sqlite://${dataDir}/baton.db`,
      },
    },
    {
      // An operator and a viewer, their hashes made by `baton hash-password`.
      command: [
        `rm -rf '${usersDir}' && mkdir -p '${usersDir}'`,
        `A=$(printf alice-pw | '${baton}' hash-password)`,
        `V=$(printf victor-pw | '${baton}' hash-password)`,
        `printf 'users:\\n  - {name: alice, role: operator, password_hash: "%s"}\\n  - {name: victor, role: viewer, password_hash: "%s"}\\n' "$A" "$V" > '${usersDir}/users.yaml'`,
        `exec '${baton}' serve`,
      ].join(' && '),
      url: `http://127.0.0.1:${usersPort}/healthz`,
      reuseExistingServer: false,
      timeout: 60_000,
      stdout: 'pipe',
      stderr: 'pipe',
      env: {
        BATON_LISTEN: `127.0.0.1:${usersPort}`,
        BATON_DATABASE_URL: `sqlite://${usersDir}/baton.db`,
        // This one serves the bundle from the build folder instead, as a
        // developer would (BATON_SITE_ROOT overrides the embedded copy).
        BATON_SITE_ROOT: path.join(root, 'target', 'site'),
        BATON_USERS_FILE: `${usersDir}/users.yaml`,
      },
    },
  ],
});
