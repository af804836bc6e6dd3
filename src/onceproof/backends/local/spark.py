"""The pipeline on this machine: the local backend's :class:`onceproof.backends.base.SparkApp`.

The driver (``python -m onceproof.job``, or a user's ``--pipeline-cmd``) runs under
:class:`DriverSupervisor` in its own process group with the ``local-cluster`` master, workers and executor
JVMs it starts. Executors are found in that group by their main class; a sink task's Python worker is found
under its executor through the process tree (worker ← pyspark daemon ← executor JVM).

Logs: ``driver-<n>.log`` per driver incarnation in ``log_dir``; each executor's ``stdout``/``stderr`` in
``log_dir/executors/<app-id>/<executor-id>/``, collected when the app stops.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import psutil

from onceproof.backends.base import BackendError, Executor, PipelineArgs
from onceproof.backends.common import faketime, interpreter, jars, processes
from onceproof.backends.common.spark import SupervisedSpark, host_executor
from onceproof.backends.common.supervisor import DriverSupervisor, collect_executor_logs, driver_argv
from onceproof.backends.local import runtimes, spark_cds
from onceproof.pipeline import jvm
from onceproof.pipeline.eos_sink import CONTROL_DIR_ENV, SINK_LOG_ENV
from onceproof.pipeline.identity import DRIVER_CLOCK_ENV


class LocalSpark(SupervisedSpark):
    """The supervised pipeline ``pipeline``, logging to ``log_dir``. Not started until :meth:`start`.
    Implements :class:`~onceproof.backends.base.SparkApp` and every optional protocol of it (``DriverPause``,
    ``ExecutorFaults``, ``ExecutorPause``, ``TaskKill``, ``Runtimes``, ``CheckpointLoss``, ``DriverClock``: the
    driver under libfaketime when :attr:`PipelineArgs.clock_file` is set)."""

    def __init__(self, pipeline: PipelineArgs, log_dir: Path):
        self.pipeline = pipeline
        self.log_dir = log_dir
        self.executor_dir = log_dir / "executors"
        # a user's pipeline runs where onceproof was started (its command names its script relative to
        # there) and learns the run's hooks and sink log from the environment (pipeline/eos_sink.py)
        user = {"cwd": pipeline.cwd or Path.cwd(), "watch_apps": True,
                "env": {CONTROL_DIR_ENV: str(pipeline.control), SINK_LOG_ENV: str(pipeline.sink_log)}} \
            if pipeline.command else {"env": {}}
        if pipeline.clock_file is not None and faketime.unavailable() is None:
            faketime.write_offset(pipeline.clock_file, 0)
            faketime.note(pipeline.clock_file)  # the reaper puts it back to +0 after a SIGKILLed harness
            base = {"LD_PRELOAD": os.environ["LD_PRELOAD"]} if os.environ.get("LD_PRELOAD") else {}
            # for the driver's JVM, which the job starts (onceproof.job.clock_env): the Python process under
            # libfaketime failed its first time.sleep (EINVAL from its clock_nanosleep on the monotonic clock)
            user["env"][DRIVER_CLOCK_ENV] = json.dumps(faketime.env(pipeline.clock_file, base=base))
        own = self._own_interpreter()
        if pipeline.command:  # the bundled pipeline sets its own (onceproof.job.build_spark)
            user["env"].update(jvm.user_job_env(os.environ, spark_cds.user_job_options(own.pyspark_dir,
                                                                                       own.pyspark_version)))
        # the bundled pipeline's JVMs map their class-data sharing archives (onceproof.job.build_spark)
        user["env"].update(spark_cds.driver_env(own.pyspark_dir, own.pyspark_version))
        self.sup = DriverSupervisor(driver_argv(pipeline, own.python, own.jars_dir, own.pyspark_version,
                                                own.deps_versions), log_dir,
                                    executor_dir=self.executor_dir, python=own.python, **user)
        self.pyspark_dirs = [own.pyspark_dir]  # every runtime's: where executor logs land

    def _own_interpreter(self) -> interpreter.Interpreter:
        """The pipeline's interpreter: the user's (``--pipeline-python``, asked again here: the config
        check refused what cannot run), the runtime its sink needs (``PipelineArgs.runtime``, built on
        first use) or this one. Raises ``InterpreterError``, ``runtimes.RuntimeBuildError``."""
        if self.pipeline.python:
            return interpreter.probe(os.path.expanduser(self.pipeline.python))
        if self.pipeline.runtime:
            return _runtime_interpreter(self.pipeline.runtime)
        import pyspark  # lazy: pyspark is heavy and only this call needs its version

        d = jars.pyspark_jars_dir().parent
        return interpreter.Interpreter(sys.executable, "", pyspark.__version__, d, "")

    @property
    def starts_before_cluster(self) -> bool:
        """Our pipeline waits for its input topic (``onceproof.job.wait_for_input``); a user's may not."""
        return not self.pipeline.command

    def start(self) -> None:
        self.sup.start()

    # ------------------------------------------------------------------ DriverClock
    def driver_clock_unavailable(self) -> str | None:
        if self.pipeline.clock_file is None:
            return "the driver was started with the real clock: plan driver-clock-skew in --nemesis"
        if self.pipeline.command:
            return "a --pipeline-cmd job's executors may inherit the driver's clock: driver-clock-skew is for " \
                   "the bundled pipeline"
        return faketime.unavailable()

    def set_driver_clock_offset(self, seconds: float) -> None:
        why = self.driver_clock_unavailable()
        if why:
            raise BackendError(why)
        faketime.write_offset(self.pipeline.clock_file, seconds)

    def driver_clock_offset(self) -> float:
        return faketime.read_offset(self.pipeline.clock_file) if self.pipeline.clock_file else 0.0

    def stop(self) -> None:
        """Stop the driver's process group (≤ 15 s for the supervision thread, then SIGKILL), then keep
        each executor's logs and drop its work directory, and remove a second runtime's half-built
        environment that no build is writing (one a killed harness left)."""
        try:
            self.sup.stop()
        finally:
            collect_executor_logs(self.pipeline.control, self.executor_dir, self.sup.app_ids, self.pyspark_dirs)
            runtimes.discard_partial()

    def kill_now(self) -> None:
        self.sup.kill_now()

    def kill_driver(self, pid: int) -> bool:
        """SIGKILL process group ``pid`` and wait (≤ 5 s); True when ``pid`` is gone."""
        processes.kill_group(pid)
        return not processes.alive(pid)

    def lose_checkpoint(self) -> str:
        """Rename the checkpoint directory to ``<name>.lost-<n>`` beside it (n: the first free number)."""
        ckpt = Path(self.pipeline.checkpoint)
        n = 1
        while ckpt.with_name(f"{ckpt.name}.lost-{n}").exists():
            n += 1
        aside = ckpt.with_name(f"{ckpt.name}.lost-{n}")
        os.rename(ckpt, aside)
        return str(aside)

    def freeze_driver(self, pid: int) -> bool:
        """SIGSTOP process group ``pid`` (the driver, its JVM, master, workers, executors)."""
        return processes.signal_group(pid, "SIGSTOP")

    def thaw_driver(self, pid: int) -> None:
        processes.signal_group(pid, "SIGCONT")

    def set_runtime(self, version: str | None) -> str:
        """The next driver start runs PySpark ``version``: ``"previous"`` (the cached previous minor,
        :func:`runtimes.previous_version`, built on first use: ~40 s cold), an explicit version
        (``"4.2.1"``), or ``None`` (the pipeline's own: ``--pipeline-python`` or this interpreter's). The
        supervisor gets the runtime's interpreter for the driver and its Python workers, and the connector's
        jars for that PySpark minus what it ships;
        a ``--pipeline-cmd`` pipeline gets it through its ``{python}`` placeholder.

        Returns the version. Raises: ``runtimes.RuntimeBuildError`` (a ``BackendError``) naming the fix.
        """
        i = self._own_interpreter() if version is None else \
            _runtime_interpreter(runtimes.previous_version() if version == "previous" else version, mid_run=True)
        self.sup.use_runtime(driver_argv(self.pipeline, i.python, i.jars_dir, i.pyspark_version, i.deps_versions),
                             i.python)
        if i.pyspark_dir not in self.pyspark_dirs:
            self.pyspark_dirs.append(i.pyspark_dir)
        return i.pyspark_version

    def executors(self) -> list[Executor]:
        """Live executor JVMs of the current driver."""
        return [host_executor(p) for p in self.sup.executors()]

    def kill_task(self, task_pid: int) -> bool:
        """SIGKILL ``task_pid`` if it is still a PySpark worker (its command line names pyspark: a pid
        reused by another process since is left alone)."""
        try:
            p = psutil.Process(task_pid)
            if "pyspark" not in " ".join(p.cmdline()):
                return False
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=5)
        except (psutil.Error, psutil.TimeoutExpired):
            return False
        return True

    def log_files(self) -> list[Path]:
        return sorted(self.log_dir.glob("driver-*.log")) + sorted(self.executor_dir.glob("*/*/std*"))


def _runtime_interpreter(version: str, mid_run: bool = False) -> interpreter.Interpreter:
    """The cached runtime of PySpark ``version`` (built on first use, :func:`runtimes.ensure`) as an
    interpreter. ``mid_run``: for a driver restart inside a run's fault, which must not also wait for the
    runtime's class-data sharing training (a Spark session of its own on the run's cores); its drivers
    start without archives until a run starts on it. Raises ``runtimes.RuntimeBuildError``."""
    rt = runtimes.ensure(version, train=(lambda _rt: []) if mid_run else None)
    return interpreter.Interpreter(str(rt.python), "", rt.version, rt.pyspark_dir, "")
