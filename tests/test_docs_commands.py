"""The experiment commands written in README.md and docs/: every script they name exists,
and every ``--flag`` they pass to ``python experiments/<script>.py`` is one that script's
parser defines, so a renamed script or flag cannot leave the docs with a command that fails
(the configs' launch commands are checked in test_configs.py)."""
import glob
import json
import os
import re
import subprocess
import sys

from conftest import ROOT

# Runs in a child process: importing the scripts here could leave state in the test process
# (signal handlers, environment); each script's main() is stopped at its parse call.
PARSERS = r"""
import argparse, importlib.util, inspect, json, os, sys
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "experiments")]
class Parsed(Exception):
  pass
def stop(self, *args, **kwargs):
  raise Parsed(self)
argparse.ArgumentParser.parse_args = argparse.ArgumentParser.parse_known_args = stop
out = {}
for name in json.loads(sys.argv[1]):
  path = os.path.join("experiments", name + ".py")
  spec = importlib.util.spec_from_file_location("_docs_" + name, path)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
    sys.argv[1:] = []
    module.main([]) if inspect.signature(module.main).parameters else module.main()
    out[name] = "main() returned without parsing"
  except Parsed as e:
    out[name] = sorted(e.args[0]._option_string_actions)
  except BaseException as e:  # pylint: disable=broad-except
    out[name] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def documented_flags(text: str, where: str) -> dict[str, set[tuple[str, str]]]:
  """script -> {(flag, where)} for each ``experiments/<script>.py`` named in ``text`` (an
  empty set where no flag follows it; backslash continuations joined; a command ends at a
  backtick, a table's '|', a shell's ';', '&' or '#', or the line's end)."""
  text = re.sub(r"\\\n\s*", " ", text)
  found: dict[str, set[tuple[str, str]]] = {}
  for m in re.finditer(r"experiments/(\w+)\.py([^`\n|;&#]*)", text):
    uses = found.setdefault(m.group(1), set())
    uses.update((flag, where) for flag in re.findall(r"(?<![\w-])(--[A-Za-z][\w-]*)",
                                                      m.group(2)))
  return found


def unknown_flags(found, parsers) -> list[str]:
  """Each documented flag that its script's parser does not define, as 'where: command'."""
  bad = []
  for script, uses in sorted(found.items()):
    options = parsers.get(script)
    if isinstance(options, str):
      bad.append(f"experiments/{script}.py: no parser read ({options})")
      continue
    bad += [f"{where}: experiments/{script}.py {flag}" for flag, where in sorted(uses)
            if flag not in options]
  return bad


def parsers_of(scripts) -> dict:
  """script -> its parser's option strings (or why none was read), from a child process."""
  r = subprocess.run([sys.executable, "-c", PARSERS, json.dumps(sorted(scripts))], cwd=ROOT,
                     capture_output=True, text=True, timeout=300, check=False)
  assert r.returncode == 0, r.stderr[-2000:]
  return json.loads(r.stdout.strip().splitlines()[-1])


def test_every_documented_experiment_flag_is_one_its_script_defines():
  found: dict[str, set[tuple[str, str]]] = {}
  paths = [os.path.join(ROOT, "README.md")] + sorted(
      glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
  for path in paths:
    with open(path, encoding="utf-8") as f:
      for script, uses in documented_flags(f.read(), os.path.relpath(path, ROOT)).items():
        found.setdefault(script, set()).update(uses)
  assert len(found) >= 10, sorted(found)  # The extraction still finds the docs' commands.
  missing = sorted(s for s in found if not os.path.exists(
      os.path.join(ROOT, "experiments", s + ".py")))
  assert not missing, f"the docs name scripts that do not exist: {missing}"
  checked = {s: uses for s, uses in found.items() if uses}  # (cudnn_check parses no flags
  # without cuDNN: the docs name it without any.)
  bad = unknown_flags(checked, parsers_of(checked))
  assert not bad, "documented flags the scripts do not define:\n" + "\n".join(bad)


def test_the_check_reports_a_flag_the_script_does_not_define():
  text = ("Run `python experiments/grn_speed.py --lengths=128 \\\n    --no_such_flag=1` "
          "| `python experiments/grn_speed.py --tiny && python -m x --other` |")
  assert documented_flags("see experiments/matmul_cpu.py", "y.md") == {"matmul_cpu": set()}
  found = documented_flags(text, "x.md")
  assert found == {"grn_speed": {("--lengths", "x.md"), ("--no_such_flag", "x.md"),
                                 ("--tiny", "x.md")}}
  assert unknown_flags(found, parsers_of(found)) == [
      "x.md: experiments/grn_speed.py --no_such_flag"]
