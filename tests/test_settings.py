"""Process settings: what a worker is handed in its environment is what it reads back."""

from crawltasks.settings import Settings


def test_settings_survive_the_environment_a_worker_gets():
    settings = Settings(broker_url="redis://127.0.0.1:6379/1", redis_url="redis://127.0.0.1:6379/2",
                        mongo_url="mongodb://127.0.0.1:27017/", mongo_db="crawls", spider_modules=["a.b", "c"])
    assert Settings.from_env(settings.to_env()) == settings
