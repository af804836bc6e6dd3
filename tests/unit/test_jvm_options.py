"""``pipeline/jvm.py``: the JVM options a pipeline's Spark JVMs get, the bundled one's and a user's job's."""

from onceproof.pipeline import jvm


def test_a_users_job_gets_the_options_through_the_launcher_variable():
    assert jvm.user_job_env({}) == {"JDK_JAVA_OPTIONS": jvm.SPARK_JAVA_OPTS}
    assert jvm.user_job_env({"ONCEPROOF_SPARK_JAVA_OPTS": "-Xint"}) == {"JDK_JAVA_OPTIONS": "-Xint"}


def test_the_users_own_launcher_options_and_an_empty_override_are_left_alone():
    assert jvm.user_job_env({"JDK_JAVA_OPTIONS": "-Xmx2g"}) == {}
    assert jvm.user_job_env({"ONCEPROOF_SPARK_JAVA_OPTS": " "}) == {}
    assert jvm.spark_java_options({"ONCEPROOF_SPARK_JAVA_OPTS": ""}) == ""
    assert jvm.spark_java_options({}) == "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def test_the_class_sharing_options_follow_the_jvm_options_unless_the_user_set_their_own():
    share = ["-XX:SharedArchiveFile=/cache/spark-driver-1.jsa", "-Xlog:cds=off"]
    assert jvm.user_job_env({}, share) == {"JDK_JAVA_OPTIONS": " ".join([jvm.SPARK_JAVA_OPTS, *share])}
    assert jvm.user_job_env({"ONCEPROOF_SPARK_JAVA_OPTS": ""}, share) == {"JDK_JAVA_OPTIONS": " ".join(share)}
    assert jvm.user_job_env({"JDK_JAVA_OPTIONS": "-Xmx2g"}, share) == {}


def test_a_user_job_maps_the_driver_archive_of_its_own_pyspark_only(tmp_path, monkeypatch):
    from onceproof.backends.common import cds
    from onceproof.backends.local import spark_cds

    monkeypatch.setenv("ONCEPROOF_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(spark_cds.jars, "java_binary", lambda: "/usr/bin/java")
    mine, other = tmp_path / "mine" / "pyspark", tmp_path / "other" / "pyspark"
    for d in (mine, other):
        (d / "jars").mkdir(parents=True)
        (d / "jars" / "spark-core.jar").write_bytes(b"jar")
    a = cds.archive("spark-driver", "/usr/bin/java", spark_cds.key(mine, "4.3.0"))
    a.parent.mkdir(parents=True, exist_ok=True)
    a.write_bytes(b"archive")
    opts = spark_cds.user_job_options(mine, "4.3.0")
    assert opts[0] == f"-XX:SharedArchiveFile={a}" and "-Xlog:cds=off" in opts, opts
    assert spark_cds.user_job_options(other, "4.3.0") == []  # another PySpark: its archive was never made
    assert spark_cds.user_job_options(mine, "4.2.0") == []
    monkeypatch.setenv("ONCEPROOF_CDS", "0")
    assert spark_cds.user_job_options(mine, "4.3.0") == []
