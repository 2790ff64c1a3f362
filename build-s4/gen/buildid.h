#define DASH_BUILD_ID "322efe34eea2"
