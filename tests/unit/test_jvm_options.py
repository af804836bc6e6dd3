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
