// exec with a terminal: a pty as the program's stdin, stdout and stderr, its
// window set and resized, bytes typed into it, signals to its foreground job.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { ExecStream, ExecStreamEvent } from "../src/index.js";
import { plainClient } from "./env.js";

const client = plainClient();
after(() => client.close());

/** What a terminal program shows, read (untimed) as far as `marker`. */
class Screen {
  text = "";
  private readonly events: AsyncIterator<ExecStreamEvent>;

  constructor(private readonly program: ExecStream) {
    this.events = program[Symbol.asyncIterator]();
  }

  async until(marker: string): Promise<void> {
    while (!this.text.includes(marker)) {
      const step = await this.events.next();
      if (step.done) assert.fail(`the program ended before showing ${JSON.stringify(marker)}: ${JSON.stringify(this.text)}`);
      const event = step.value;
      assert.notEqual(event.kind, "stderr", "a terminal's output all arrives as stdout");
      if (event.kind === "stdout") this.text += Buffer.from(event.data).toString();
    }
  }

  /** The rest of the output, to the program's exit. */
  async end(): Promise<number> {
    for (;;) {
      const step = await this.events.next();
      if (step.done) return (await this.program.exit).exitCode;
      const event = step.value;
      if (event.kind === "stdout") this.text += Buffer.from(event.data).toString();
    }
  }
}

test("with tty the program's stdin, stdout and stderr are a /dev/pts terminal", async () => {
  await using session = await client.session();
  const shown = await session.exec({ command: "tty; echo to-stderr >&2" }, { tty: true });
  assert.equal(shown.exitCode, 0);
  assert.match(shown.stdout.toString(), /^\/dev\/pts\/\d+\r\nto-stderr\r\n$/);
  assert.equal(shown.stderr.length, 0);

  const plain = await session.exec(["tty"]);
  assert.equal(plain.stdout.toString(), "not a tty\n");
});

test("stdin given to exec is typed, and its end types ^D", async () => {
  await using session = await client.session();
  const typed = await session.exec(["cat"], { tty: true, stdin: "typed\r" });
  assert.equal(typed.exitCode, 0);
  assert.match(typed.stdout.toString(), /^typed\r\ntyped\r\n/);
});

test("size sets the terminal's window and resize changes it", async () => {
  await using session = await client.session();
  await using program = session.execStream(
    ["bash", "-c", 'stty size; read -r line; stty size; echo "done"'],
    { tty: true, size: { rows: 24, cols: 80 } },
  );
  const screen = new Screen(program);
  await screen.until("24 80\r\n");
  program.resize(40, 120);
  program.write("\r");
  assert.equal(await screen.end(), 0);
  assert.match(screen.text, /^24 80\r\n\r\n40 120\r\ndone\r\n$/);
});

test("a read -p prompt is answered by typing", async () => {
  await using session = await client.session();
  await using program = session.execStream(
    ["bash", "-c", 'read -r -p "name? " name; echo "hello $name"'],
    { tty: true },
  );
  const screen = new Screen(program);
  await screen.until("name? ");
  program.write("ada\r");
  assert.equal(await screen.end(), 0);
  assert.equal(screen.text, "name? ada\r\nhello ada\r\n");
});

const interrupts: [string, (program: ExecStream) => void][] = [
  ["^C typed into the terminal", (program) => program.write("\x03")],
  ["sendSignal(INT) under tty", (program) => program.sendSignal("INT")],
];

for (const [how, interrupt] of interrupts) {
  test(`${how} interrupts its foreground job`, async () => {
    await using session = await client.session();
    await using program = session.execStream({ command: "echo ready; sleep 100; echo not-reached" }, { tty: true });
    const screen = new Screen(program);
    await screen.until("ready");
    interrupt(program);
    assert.equal(await screen.end(), 130);
    assert.equal((await program.exit).signal, "INT");
    assert.doesNotMatch(screen.text, /not-reached/);
  });
}
