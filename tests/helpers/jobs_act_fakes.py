"""The health check's Slurm side for jobs (gpuhc/slurm/jobs/act.py) without a cluster: a flow
stand-in, a run report of jobs results, and one script playing scontrol and squeue for job 8 as
Slurm 22.05 answers (no --json; squeue's fields with the separator of the call), the job's user uid 1000."""

from __future__ import annotations


def flow_for(tmp_path, scontrol: str):
    from types import SimpleNamespace

    from gpuhc.model.deadline import Deadline

    lines = []
    cfg = SimpleNamespace(check_settings=lambda cid: {"thresholds": {}}, section=lambda name: {"commands": []})
    opts = SimpleNamespace(state_dir=str(tmp_path / "state"), config=cfg)
    return SimpleNamespace(node="n1", opts=opts, slurm={"scontrol": scontrol, "squeue": scontrol, "timeout_s": 5.0},
                           deadline=Deadline.after(30), now=lambda: 2000.0,
                           log=lambda text, loud=False: lines.append(text)), lines


def report_of(*values):
    from types import SimpleNamespace

    from gpuhc.model.result import Result, Status

    return SimpleNamespace(results=[Result("jobs", Status(status), "m", f"job{v['job']}", value=v) for status, v in values])


def fake_slurm(tmp_path, nodes: str = "n[1-2]", state: str = "RUNNING"):
    """One script playing scontrol (show job, update) and squeue for job 8, keeping the
    AdminComment written (so a read-back sees it); every argv logged."""
    log, comment = tmp_path / "calls", tmp_path / "comment"
    fake = tmp_path / "slurm"
    fake.write_text(f"""#!/bin/sh
echo "$@" >> {log}
case "$1" in
  --json) echo "scontrol: unrecognized option '--json'" >&2; exit 1;;
  -h) for a; do fmt="$a"; done; sep="${{fmt#%T}}"; sep="${{sep%%%U*}}"
      printf "{state}%s1000%s{nodes}%s%s/w/run.sh%s/w%s\\n" "$sep" "$sep" "$sep" "$sep" "$sep" "$sep";;
  show) printf 'JobId=8 JobName=x\\n   JobState={state}\\n   Command=/w/run.sh\\n   WorkDir=/w\\n'
      [ -s {comment} ] && printf '   AdminComment=%s \\n' "$(cat {comment})"
      printf '   StdErr=/w/o\\n';;
  update) printf '%s' "${{3#AdminComment=}}" > {comment};;
esac
exit 0
""")
    fake.chmod(0o755)
    return fake, log, comment
